//go:build !race

package reentrant_test

// raceAllocs is 0 without the race detector (see race_on_test.go).
const raceAllocs = 0
