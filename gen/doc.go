// Package gen is weirgen's code generator: a schema model in, one Go file per table
// out. Each file holds the table's row struct, typed chunk builder and view, pk codec
// and typed pk compare, value codec with projected decode, vnode kernel and the merge
// kernels of arrangement backfill (mark and split), and registers them in vec's
// registry by the table's fingerprint.
//
// Every template reads the kind table in kinds.go; output is deterministic (it depends
// only on the schema, the package name and the schema file's base name) and gofmt'ed.
//
// Every identifier a generated file declares, and every method on its types, is spelt
// from schema's table of generated identifiers (schema.Ident, Table.Ident,
// Table.ColumnIdent, Ident.Methods); the validator checks schemas against the same
// table, renaming a column whose Go name is a method of a generated type with the
// columns as fields (suffix Col, schema.ReservedColumnNames) and refusing tables whose
// identifiers collide. Generate refuses, too, tables of one file name (FileName);
// names that Go's build rules would skip or restrict to one platform are changed.
// The tests check that a generated file declares exactly the table's identifiers, and
// that a schema mapping a table or column onto any of them, or onto a name Go or the
// generated code uses, generates code that compiles or is refused.
//
// # Files
//
//   - gen.go: Generate and Table (one file per table), the file's header (the table's
//     fingerprint, schema and column index constants), the row struct and the typed
//     chunk builder.
//   - kinds.go: the kind table every template reads.
//   - view.go: the typed view, the value encoder, and the pk codec and typed compare.
//   - values.go: the projected decode of row values (DecodeValues).
//   - rowdecoder.go: the one-value-at-a-time row decoder (vec.RowDecoder).
//   - marker.go: the backfill's marker of upstream chunks against positions.
//   - kernels.go: the kernels type that registers with vec, and its methods: key and
//     value encode and decode, vnodes and split.
//   - files.go: FileName, and the check that no two tables share a file name.
package gen
