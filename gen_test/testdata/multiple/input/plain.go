package multi

// NotASpot has no directive.
type NotASpot interface{ Do() }
