package bad

// Room_Join_FullMethodName is declared in another file.
const Room_Join_FullMethodName = "mine"
