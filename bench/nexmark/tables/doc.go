// Package tables holds the generated code of the Nexmark tables person, auction and
// bid (nexmark.yaml): typed builders, views, codecs and kernels. Importing it registers
// the kernels with package vec.
package tables

//go:generate go tool weirgen -schema nexmark.yaml -pkg tables -out .
