// Package testschemas holds generated kernels for a set of test schemas
// (testschemas.yaml) that together cover every column type, nullable and not, every
// key order, and 1 to 4 pk columns. Its tests check the generated kernels against
// vec's generic ones on seeded random data.
package testschemas

//go:generate go tool weirgen -schema testschemas.yaml -pkg testschemas -out .
