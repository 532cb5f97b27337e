//go:build race

package reentrant_test

// raceAllocs is what the race detector's instrumentation adds to an
// allocation count (TestLockUnlockAllocations): 3 per Lock+Unlock with Go
// 1.26.
const raceAllocs = 3
