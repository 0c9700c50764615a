//go:build linux && race

package main

// raceEnabled builds the floodgate binary of the end-to-end tests with
// -race when the tests themselves run with it.
const raceEnabled = true
