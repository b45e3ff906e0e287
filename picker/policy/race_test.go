//go:build race

package policy

// raceEnabled is true when the race detector is on; the simulation, which
// runs on one goroutine, skips itself then to keep the suite quick.
const raceEnabled = true
