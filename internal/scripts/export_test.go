package scripts

// The reply parsers, for the package's tests, which check and fuzz them
// without a server.
var (
	ParseAcquire = parseAcquire
	ParseRelease = parseRelease
	ParseExtend  = parseExtend
	ParseInspect = parseInspect
)

// NoFunctions classifies a load or call error (functions.go).
var NoFunctions = noFunctions

// Waiting is how many calls wait for a batch of b.
func Waiting(b Batched) int {
	b.b.mu.Lock()
	defer b.b.mu.Unlock()
	return len(b.b.waiting)
}
