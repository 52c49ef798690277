// Package orders is the README's example of a schema of one's own: orders.yaml, the
// generate directive below, and the code weirgen writes from them (orders.gen.go). Its
// example test builds a chunk with the generated builder and reads it back through
// the generated view; importing the package registers the generated kernels of the
// orders table's shape with package vec.
package orders

// README:begin generate
//go:generate go tool weirgen -schema orders.yaml -pkg orders -out .
// README:end
