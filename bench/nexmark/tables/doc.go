// Package tables holds the generated code of the Nexmark tables person, auction and
// bid (nexmark.yaml): typed builders, views, codecs and kernels. Importing it registers
// the kernels with package vec.
//
// Files: nexmark.yaml, the schema file; person.gen.go, auction.gen.go and bid.gen.go,
// what weirgen generates from it (regenerate with go generate, never by hand).
package tables

//go:generate go tool weirgen -schema nexmark.yaml -pkg tables -out .
