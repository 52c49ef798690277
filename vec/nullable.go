package vec

// Nullable is a value of a nullable column in a generated row struct.
type Nullable[T any] struct {
	Value T
	Valid bool // false: NULL
}

// Some returns a non-null Nullable.
func Some[T any](v T) Nullable[T] { return Nullable[T]{Value: v, Valid: true} }

// Null returns a NULL of type T.
func Null[T any]() Nullable[T] { return Nullable[T]{} }
