package bad

// The package may use its generated API before the first generation: these are not errors.
var _ = OpenRoom
var _ RoomRef
