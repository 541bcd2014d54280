//go:build race

package gateway

// raceEnabled: the race detector slows the engine about tenfold, so the
// heaviest tests scale their prompts down under it.
const raceEnabled = true
