//go:build cgo

package bench

// builtWithCgo is whether this binary was built with cgo (BackfillResult.Cgo).
const builtWithCgo = true
