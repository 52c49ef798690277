package schema

import (
	"fmt"
	"slices"
	"sort"
	"unicode"
)

// Generated identifiers. For every table, weirgen (package gen) declares the
// package-level identifiers of the idents table below, the methods listed with each of
// its types, and one index constant <T>Col<C> per column (Table.ColumnIdent); besides
// those a generated file declares only init functions and blank (_) variables. This
// table is the one source of truth for those names: the generator takes every name it
// declares from it (gen's tests check that a generated file declares exactly these and
// that each one either compiles or is refused), and the validator derives from it
//
//   - the reserved column names: a column whose Go name is a method of a type with a
//     reserve mark gets the suffix "Col" (a column "pk" becomes the field PKCol, since
//     the view has a method PK), and
//   - the clash check across the tables of a schema file: two tables (or a table and
//     another's column constant) that would declare the same identifier are refused,
//     at the line of the later one.
//
// Adding a generated identifier means adding it here; gen then spells it with
// Table.Ident, and the checks follow.

// Ident is one package-level identifier weirgen declares for every table; Table.Ident
// spells it for a table. <T> is the table's Go name (Table.GoName) and <t> is the same
// with its leading capitals lowered ("Bid" -> "bid", "URLLog" -> "urlLog").
type Ident uint8

// The identifiers of a generated file, in the order the generator declares them.
const (
	IdentFingerprint Ident = iota // <T>Fingerprint
	IdentTableFunc                // <T>Table
	IdentTableVar                 // <t>Table
	IdentArrowSchema              // <t>ArrowSchema
	IdentLayout                   // <t>Layout
	IdentRow                      // <T>
	IdentBuilder                  // <T>Builder
	IdentNewBuilder               // New<T>Builder
	IdentView                     // <T>View
	IdentViewOf                   // <t>ViewOf
	IdentNewView                  // New<T>View
	IdentValueZero                // <t>ValueZero
	IdentPK                       // <T>PK
	IdentAppendPK                 // Append<T>PK
	IdentDecodePK                 // Decode<T>PK
	IdentKernels                  // <t>Kernels
	IdentKernelsFunc              // <T>Kernels
	IdentValueOK                  // <t>ValueOK
	IdentRowDecoder               // <t>RowDecoder
	IdentMarker                   // <t>Marker
	numIdents
)

type identSpec struct {
	prefix, suffix string
	lower          bool   // built on <t> rather than <T>
	what           string // for messages
	methods        []string
	// reserve: a column whose Go name is one of methods is renamed (suffix Col). Set
	// on every type whose fields are named after columns (a field and a method of one
	// type share a name space): the view, and the row and pk structs should they get
	// methods. Also set on the builder, whose methods have been reserved since the
	// first release, so that columns such as "reserve" keep their Go names (ReserveCol).
	reserve bool
}

var idents = [numIdents]identSpec{
	IdentFingerprint: {suffix: "Fingerprint", what: "fingerprint constant"},
	IdentTableFunc:   {suffix: "Table", what: "schema function"},
	IdentTableVar:    {suffix: "Table", lower: true, what: "schema variable"},
	IdentArrowSchema: {suffix: "ArrowSchema", lower: true, what: "Arrow schema variable"},
	IdentLayout:      {suffix: "Layout", lower: true, what: "value layout variable"},
	IdentRow:         {what: "row struct", reserve: true},
	IdentBuilder: {suffix: "Builder", what: "chunk builder", reserve: true,
		methods: []string{"Reserve", "Append", "Len", "Build", "Release"}},
	IdentNewBuilder: {prefix: "New", suffix: "Builder", what: "builder constructor"},
	IdentView: {suffix: "View", what: "chunk view", reserve: true,
		methods: []string{"Chunk", "NumRows", "Op", "Visible", "Row", "PK", "ComparePK", "AppendKey", "AppendDistKey", "AppendValue"}},
	IdentViewOf:    {suffix: "ViewOf", lower: true, what: "view function"},
	IdentNewView:   {prefix: "New", suffix: "View", what: "view constructor"},
	IdentValueZero: {suffix: "ValueZero", lower: true, what: "zero value variable"},
	IdentPK:        {suffix: "PK", what: "primary key struct", reserve: true},
	IdentAppendPK:  {prefix: "Append", suffix: "PK", what: "pk encoder"},
	IdentDecodePK:  {prefix: "Decode", suffix: "PK", what: "pk decoder"},
	IdentKernels: {suffix: "Kernels", lower: true, what: "kernels type",
		methods: []string{"Table", "Generated", "EncodeKeys", "EncodeValues", "DecodeKeys", "DecodeValues", "NewRowDecoder", "Vnodes", "Split", "NewMarker"}},
	IdentKernelsFunc: {suffix: "Kernels", what: "kernels function"},
	IdentValueOK:     {suffix: "ValueOK", lower: true, what: "value check function"},
	IdentRowDecoder: {suffix: "RowDecoder", lower: true, what: "row decoder type",
		methods: []string{"Begin", "Append", "Flush"}},
	IdentMarker: {suffix: "Marker", lower: true, what: "marker type", methods: []string{"Mark"}},
}

// Idents lists every identifier weirgen declares for a table, besides the column
// constants (Table.ColumnIdent).
func Idents() []Ident {
	out := make([]Ident, numIdents)
	for i := range out {
		out[i] = Ident(i)
	}
	return out
}

// String describes the identifier ("chunk builder").
func (id Ident) String() string {
	if id >= numIdents {
		return fmt.Sprintf("ident(%d)", uint8(id))
	}
	return idents[id].what
}

// Exported reports whether the identifier is built on <T> (and so exported) rather
// than on <t>.
func (id Ident) Exported() bool { return id < numIdents && !idents[id].lower }

// Methods lists the methods weirgen declares on the identifier (a type); nil for
// functions, constants and variables.
func (id Ident) Methods() []string {
	if id >= numIdents {
		return nil
	}
	return slices.Clone(idents[id].methods)
}

// Ident spells the identifier for the table, whose GoName must be set (see Validate).
func (t *Table) Ident(id Ident) string {
	if id >= numIdents {
		panic(fmt.Sprintf("schema: Ident(%d) out of range", uint8(id)))
	}
	s := idents[id]
	base := t.GoName
	if s.lower {
		base = lowerFirst(base)
	}
	return s.prefix + base + s.suffix
}

// ColumnIdent is the index constant weirgen declares for column i, <T>Col<C> where
// <C> is the column's Go name.
func (t *Table) ColumnIdent(i int) string { return t.GoName + "Col" + t.Columns[i].GoName }

// ReservedColumnNames lists, sorted, the Go names a column does not get as they are:
// one of these gets the suffix "Col" (see GoName). They are the methods of the
// generated types whose fields are named after columns (the view; the row and pk
// structs have none) and of the builder.
func ReservedColumnNames() []string {
	out := make([]string, 0, len(reservedColumnNames))
	for n := range reservedColumnNames {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var reservedColumnNames = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range idents {
		if s.reserve {
			for _, n := range s.methods {
				m[n] = true
			}
		}
	}
	return m
}()

// lowerFirst lowers the leading run of capitals ("URLTable" -> "urlTable", "Bid" ->
// "bid", "ID" -> "id").
func lowerFirst(s string) string {
	r := []rune(s)
	i := 0
	for i < len(r) && unicode.IsUpper(r[i]) {
		i++
	}
	if i > 1 && i < len(r) {
		i-- // keep the capital that starts the next word
	}
	for j := 0; j < i; j++ {
		r[j] = unicode.ToLower(r[j])
	}
	return string(r)
}

// generatedName is one identifier a table's generated file declares, with the schema
// field it comes from.
type generatedName struct {
	name  string
	what  string
	field string // the table's name, or a column's
	line  int
}

func (t *Table) generatedNames() []generatedName {
	out := make([]generatedName, 0, int(numIdents)+len(t.Columns))
	nameField, nameLine := t.Name+".name", t.lineOf("name")
	if nameLine == 0 {
		nameLine = t.Line
	}
	for _, id := range Idents() {
		out = append(out, generatedName{name: t.Ident(id), what: "the " + id.String(), field: nameField, line: nameLine})
	}
	for i, c := range t.Columns {
		line := t.lineOf("columns." + fmt.Sprint(i))
		if line == 0 {
			line = t.Line
		}
		out = append(out, generatedName{
			name: t.ColumnIdent(i), what: "the index constant of column " + c.Name,
			field: t.Name + ".columns." + c.Name + ".name", line: line,
		})
	}
	return out
}

// CheckNames reports every clash between the package-level identifiers that weirgen
// would declare for the tables (see Idents): the later table (or column) of each is
// named, at its line. Parse runs it; a File built in code should be checked with it
// before it is generated from. Every table must be validated already.
func (f *File) CheckNames() error {
	var errs ErrorList
	checkNames(f.Path, f.Tables, &errs)
	return errs.Err()
}

// checkNames adds an error for each table name and column of tables whose generated
// identifier another table (or the same one) declares already; one per field.
func checkNames(file string, tables []*Table, errs *ErrorList) {
	type owner struct {
		table string
		what  string
	}
	owners := map[string]owner{}
	for _, t := range tables {
		if t.GoName == "" {
			continue
		}
		reported := map[string]bool{}
		for _, n := range t.generatedNames() {
			o, ok := owners[n.name]
			if !ok {
				owners[n.name] = owner{table: t.Name, what: n.what}
				continue
			}
			if reported[n.field] {
				continue
			}
			reported[n.field] = true
			other := "table " + o.table + "'s"
			if o.table == t.Name {
				other = "this table's"
			}
			errs.add(file, n.line, n.field, "generated Go name %s (%s) collides with %s %s (%s); rename one of them",
				n.name, n.what, other, n.name, o.what)
		}
	}
}
