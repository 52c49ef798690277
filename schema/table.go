package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// DefaultVnodeCount is the vnode count of a table that does not declare one.
const DefaultVnodeCount = 256

// MaxVnodeCount is the largest vnode count a table may declare.
const MaxVnodeCount = 32768

// Column is one column of a table.
type Column struct {
	Name     string // as declared in the schema file
	GoName   string // exported Go identifier derived from Name (see GoName)
	Type     Type
	Nullable bool
}

// KeyColumn is one column of the primary key, with its sort order. A scan of one vnode
// returns rows in the order these define, and every comparison with a backfill position
// uses the same order.
type KeyColumn struct {
	Column     int // index into Table.Columns
	Desc       bool
	NullsFirst bool
}

func (k KeyColumn) orderString() string {
	s := "asc"
	if k.Desc {
		s = "desc"
	}
	if k.NullsFirst {
		return s + " nulls first"
	}
	return s + " nulls last"
}

// Table is one table of a schema. Build one with a schema file (Parse) or by hand and
// then call Validate.
type Table struct {
	Name       string
	GoName     string
	Columns    []Column
	PK         []KeyColumn
	DistKey    []int // column indexes; every one is also a pk column
	VnodeCount int

	// Where the table was declared, for messages; empty for tables built in code.
	File string
	Line int

	parseState
}

// ColumnIndex returns the index of the column with the given name.
func (t *Table) ColumnIndex(name string) (int, bool) {
	for i, c := range t.Columns {
		if c.Name == name {
			return i, true
		}
	}
	return -1, false
}

// PKColumns returns the column indexes of the primary key in key order.
func (t *Table) PKColumns() []int {
	out := make([]int, len(t.PK))
	for i, k := range t.PK {
		out[i] = k.Column
	}
	return out
}

// IsPK reports whether column i is part of the primary key.
func (t *Table) IsPK(i int) bool {
	for _, k := range t.PK {
		if k.Column == i {
			return true
		}
	}
	return false
}

// ArrowSchema is the Arrow schema of a chunk holding every column of the table.
func (t *Table) ArrowSchema() *arrow.Schema {
	return t.ProjectedArrowSchema(nil)
}

// ProjectedArrowSchema is the Arrow schema of the given columns, in the given order; nil
// means every column.
func (t *Table) ProjectedArrowSchema(cols []int) *arrow.Schema {
	if cols == nil {
		cols = make([]int, len(t.Columns))
		for i := range cols {
			cols[i] = i
		}
	}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		col := t.Columns[c]
		fields[i] = arrow.Field{Name: col.Name, Type: col.Type.ArrowType(), Nullable: col.Nullable}
	}
	return arrow.NewSchema(fields, nil)
}

// Canonical is a stable text form of everything that decides the table's encodings and
// vnodes: names, types, nullability, pk order, distribution key and vnode count.
func (t *Table) Canonical() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s vnodes %d\n", t.Name, t.VnodeCount)
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "column %s %s nullable=%v\n", c.Name, c.Type, c.Nullable)
	}
	for _, k := range t.PK {
		fmt.Fprintf(&b, "pk %s %s\n", t.Columns[k.Column].Name, k.orderString())
	}
	for _, d := range t.DistKey {
		fmt.Fprintf(&b, "dist %s\n", t.Columns[d].Name)
	}
	return b.String()
}

// Fingerprint identifies the table's shape: two tables with the same fingerprint share
// every encoding, so a kernel generated for one serves the other.
func (t *Table) Fingerprint() string {
	sum := sha256.Sum256([]byte(t.Canonical()))
	return hex.EncodeToString(sum[:12])
}

// Validate checks a table built in code with the same rules the schema file parser
// applies, and fills GoName fields and defaults (vnode count, distribution key).
func (t *Table) Validate() error {
	var errs ErrorList
	t.validate(&errs, nil)
	return errs.Err()
}
