package exchange

import "time"

// blockBriefly gives other goroutines (the sender, grpc's writers) a moment to run while
// a test waits for a count to settle. No assertion depends on how long it takes.
func blockBriefly() { time.Sleep(2 * time.Millisecond) }
