// Package schema is Weir's schema model: tables, columns, types, the primary key with
// its order, the distribution key and the vnode count, plus the schema file parser and
// validator. It imports nothing else of Weir.
//
// It also holds the table of the Go identifiers weirgen generates for a table
// (generated.go: Ident, Table.Ident, Table.ColumnIdent), which the generator spells
// its names from and the validator checks against: table and column names become Go
// names (GoName), a column whose Go name is a method of a generated type that holds
// the columns as fields gets the suffix Col (ReservedColumnNames), and two columns of
// one Go name or two tables whose generated identifiers collide are refused
// (File.CheckNames), each as "file:line: field: reason".
//
// # Files
//
//   - types.go: Kind, Type (precision and scale for decimals), their widths and Arrow
//     types.
//   - arrow.go: TypeOfArrow, the column type of an Arrow type.
//   - table.go: Table, Column and KeyColumn, the vnode count limits, the table's Arrow
//     schemas.
//   - parse.go: File, Parse and ParseFile (the schema file format), ParseType and
//     ParseKeySpec.
//   - validate.go: the checks of a parsed or hand-built table, resolving its key specs.
//   - errors.go: Error ("file:line: field: reason") and ErrorList.
//   - goname.go: GoName, a schema name as an exported Go identifier.
//   - generated.go: the identifiers weirgen generates, ReservedColumnNames, and the
//     checks that they do not collide.
package schema
