// Package tables holds the generated code of the Nexmark tables person, auction and
// bid (nexmark.yaml): typed builders, views, codecs and kernels. Importing it registers
// the kernels with package vec.
package tables

//go:generate go run github.com/seed04fbb902/weir/tools/weirgen -schema nexmark.yaml -pkg tables -out .
