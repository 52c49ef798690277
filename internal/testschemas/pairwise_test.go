package testschemas_test

import (
	"fmt"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/schema"
)

// keyOrders are the four key orders of a pk column.
var keyOrders = []string{"asc nulls last", "asc nulls first", "desc nulls first", "desc nulls last"}

func keyOrder(k schema.KeyColumn) string {
	dir, nulls := "asc", "nulls last"
	if k.Desc {
		dir = "desc"
	}
	if k.NullsFirst {
		nulls = "nulls first"
	}
	return dir + " " + nulls
}

func nullability(nullable bool) string {
	if nullable {
		return "nullable"
	}
	return "not null"
}

// fastKinds are the kinds whose values a plain < orders as their keys do: a table
// whose pk columns are all of these and NOT NULL takes the generated marker's typed
// fast path.
var fastKinds = []schema.Kind{schema.Int16, schema.Int32, schema.Int64, schema.Date, schema.Timestamp, schema.Timestamptz}

// TestPairwiseCoverage checks the design that testschemas.yaml's header describes:
// every pair of values of two of a pk column's factors (its type, key order,
// nullability and its table's pk width) is held by a pk column of some table, every
// (type, nullability) pair is a value column of some table, and every case outside
// the pairs (odd names, distribution keys, vnode counts, the marker's fast path,
// value layouts) is held by some table.
func TestPairwiseCoverage(t *testing.T) {
	f, err := schema.ParseFile("testschemas.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, k := range schema.Kinds {
		kinds = append(kinds, k.String())
	}
	factors := []struct {
		name   string
		values []string
	}{
		{"type", kinds},
		{"key order", keyOrders},
		{"nullability", []string{"nullable", "not null"}},
		{"pk width", []string{"width 1", "width 2", "width 3", "width 4"}},
	}
	// Each pk column as its factors' values, in the order of factors.
	var pkCols [][4]string
	values := map[[2]string]bool{} // (type, nullability) of the value columns
	for _, tbl := range f.Tables {
		inPK := map[int]bool{}
		for _, k := range tbl.PK {
			c := tbl.Columns[k.Column]
			inPK[k.Column] = true
			pkCols = append(pkCols, [4]string{c.Type.Kind.String(), keyOrder(k), nullability(c.Nullable), fmt.Sprintf("width %d", len(tbl.PK))})
		}
		for i, c := range tbl.Columns {
			if !inPK[i] {
				values[[2]string{c.Type.Kind.String(), nullability(c.Nullable)}] = true
			}
		}
	}
	for a := range factors {
		for b := a + 1; b < len(factors); b++ {
			for _, va := range factors[a].values {
				for _, vb := range factors[b].values {
					if !slices.ContainsFunc(pkCols, func(c [4]string) bool { return c[a] == va && c[b] == vb }) {
						t.Errorf("no pk column of %s %s and %s %s", factors[a].name, va, factors[b].name, vb)
					}
				}
			}
		}
	}
	for _, k := range kinds {
		for _, n := range []string{"nullable", "not null"} {
			if !values[[2]string{k, n}] {
				t.Errorf("no value column of type %s, %s", k, n)
			}
		}
	}

	fast := func(tbl *schema.Table) bool {
		for _, k := range tbl.PK {
			c := tbl.Columns[k.Column]
			if c.Nullable || !slices.Contains(fastKinds, c.Type.Kind) {
				return false
			}
		}
		return true
	}
	varCols := func(tbl *schema.Table) int {
		n := 0
		for _, c := range tbl.Columns {
			if c.Type.VarLen() {
				n++
			}
		}
		return n
	}
	anyColumn := func(tbl *schema.Table, p func(schema.Column) bool) bool { return slices.ContainsFunc(tbl.Columns, p) }
	cases := []struct {
		what string
		held func(*schema.Table) bool
	}{
		{"a column named after a Go keyword", func(tbl *schema.Table) bool {
			return anyColumn(tbl, func(c schema.Column) bool { return token.IsKeyword(c.Name) })
		}},
		{"a column name that starts with a capital", func(tbl *schema.Table) bool {
			return anyColumn(tbl, func(c schema.Column) bool { return c.Name[0] >= 'A' && c.Name[0] <= 'Z' })
		}},
		{"a column renamed with the suffix Col", func(tbl *schema.Table) bool {
			return anyColumn(tbl, func(c schema.Column) bool {
				return strings.HasSuffix(c.GoName, "Col") && !strings.HasSuffix(strings.ToLower(c.Name), "col")
			})
		}},
		{"a distribution key smaller than the pk", func(tbl *schema.Table) bool { return len(tbl.DistKey) < len(tbl.PK) }},
		{"a distribution key of several columns in an order other than the pk's", func(tbl *schema.Table) bool {
			if len(tbl.DistKey) < 2 {
				return false
			}
			pos := func(col int) int {
				return slices.IndexFunc(tbl.PK, func(k schema.KeyColumn) bool { return k.Column == col })
			}
			return !slices.IsSortedFunc(tbl.DistKey, func(a, b int) int { return pos(a) - pos(b) })
		}},
		{"a distribution key that is not a prefix of the pk", func(tbl *schema.Table) bool {
			for i, d := range tbl.DistKey {
				if tbl.PK[i].Column != d {
					return true
				}
			}
			return false
		}},
		{"vnode count 1", func(tbl *schema.Table) bool { return tbl.VnodeCount == 1 }},
		{"a vnode count that is a power of two above 1", func(tbl *schema.Table) bool {
			return tbl.VnodeCount > 1 && tbl.VnodeCount&(tbl.VnodeCount-1) == 0
		}},
		{"a vnode count that is not a power of two", func(tbl *schema.Table) bool { return tbl.VnodeCount&(tbl.VnodeCount-1) != 0 }},
		{"the marker's fast path with an ascending first pk column", func(tbl *schema.Table) bool { return fast(tbl) && !tbl.PK[0].Desc }},
		{"the marker's fast path with a descending first pk column", func(tbl *schema.Table) bool { return fast(tbl) && tbl.PK[0].Desc }},
		{"no var-width column", func(tbl *schema.Table) bool { return varCols(tbl) == 0 }},
		{"several var-width columns", func(tbl *schema.Table) bool { return varCols(tbl) >= 2 }},
		{"a null bitmap of more than one byte", func(tbl *schema.Table) bool { return len(tbl.Columns) > 8 }},
		{"a column count that is a multiple of 8", func(tbl *schema.Table) bool { return len(tbl.Columns)%8 == 0 }},
		{"value columns only after the pk columns", func(tbl *schema.Table) bool {
			return len(tbl.Columns) > len(tbl.PK) && !anyPKOutOfPlace(tbl)
		}},
		{"pk columns that are not the first columns in column order", anyPKOutOfPlace},
	}
	for w := 1; w <= 4; w++ {
		cases = append(cases, struct {
			what string
			held func(*schema.Table) bool
		}{fmt.Sprintf("the marker's fast path at pk width %d", w), func(tbl *schema.Table) bool { return fast(tbl) && len(tbl.PK) == w }})
	}
	for _, c := range cases {
		if !slices.ContainsFunc(f.Tables, c.held) {
			t.Errorf("no table has %s", c.what)
		}
	}
}

// anyPKOutOfPlace reports whether some pk column j of tbl is not its column j.
func anyPKOutOfPlace(tbl *schema.Table) bool {
	for j, k := range tbl.PK {
		if k.Column != j {
			return true
		}
	}
	return false
}
