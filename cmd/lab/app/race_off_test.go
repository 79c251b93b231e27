//go:build !race

package app

// raceDetector reports whether the tests run under -race (about 17 times slower
// on the simulator).
const raceDetector = false
