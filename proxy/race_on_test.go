//go:build race

package proxy

// raceDetector says the tests run with -race, under which sync.Pool drops
// what it is given at random: allocation counts are not exact.
const raceDetector = true
