//go:build !race

package ratelimit_test

// raceEnabled is true when the tests run under the race detector, which makes
// them several times slower: long tests do less work then.
const raceEnabled = false
