package multi

// The package uses its generated API: the first generation, before any output exists, must
// not fail on these references.
var (
	_ = OpenAlpha
	_ BetaRef
	_ = LocalGamma
)
