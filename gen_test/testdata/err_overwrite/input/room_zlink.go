package bad

// Hand-written, not generated: zlinkgen must not overwrite it.
var handWritten = true

var _ = handWritten
