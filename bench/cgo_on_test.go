//go:build cgo

package bench

const builtWithCgo = true
