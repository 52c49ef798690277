package executors

// closeOnce makes an executor's Close idempotent: embedded in the executor, it
// reports whether Close ran before (closed), and firstClose lets only the first
// Close do the work.
type closeOnce struct {
	closed bool
}

// firstClose marks the executor closed and reports whether it was open until now:
// false for every Close after the first.
func (c *closeOnce) firstClose() bool {
	if c.closed {
		return false
	}
	c.closed = true
	return true
}
