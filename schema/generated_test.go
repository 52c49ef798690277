package schema_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/schema"
)

func TestIdentSpelling(t *testing.T) {
	bid := &schema.Table{GoName: "Bid", Columns: []schema.Column{{GoName: "DateTime"}}}
	url := &schema.Table{GoName: "URLLog"}
	for _, c := range []struct {
		id       schema.Ident
		bid, url string
	}{
		{schema.IdentRow, "Bid", "URLLog"},
		{schema.IdentBuilder, "BidBuilder", "URLLogBuilder"},
		{schema.IdentNewBuilder, "NewBidBuilder", "NewURLLogBuilder"},
		{schema.IdentDecodePK, "DecodeBidPK", "DecodeURLLogPK"},
		{schema.IdentKernelsFunc, "BidKernels", "URLLogKernels"},
		{schema.IdentKernels, "bidKernels", "urlLogKernels"},
		{schema.IdentTableVar, "bidTable", "urlLogTable"},
	} {
		if got := bid.Ident(c.id); got != c.bid {
			t.Errorf("Bid: %s is %s, want %s", c.id, got, c.bid)
		}
		if got := url.Ident(c.id); got != c.url {
			t.Errorf("URLLog: %s is %s, want %s", c.id, got, c.url)
		}
	}
	if got := bid.ColumnIdent(0); got != "BidColDateTime" {
		t.Errorf("column constant %s", got)
	}
	// Every identifier is spelt differently for one table, and the exported ones are.
	seen := map[string]schema.Ident{}
	for _, id := range schema.Idents() {
		n := bid.Ident(id)
		if other, dup := seen[n]; dup {
			t.Errorf("%s and %s are both %s", id, other, n)
		}
		seen[n] = id
		if exp := n[0] >= 'A' && n[0] <= 'Z'; exp != id.Exported() {
			t.Errorf("%s: %s, Exported() = %v", id, n, id.Exported())
		}
	}
}

// TestReservedColumnNames: a column named after a method of the generated view or
// builder gets the suffix Col, the names of the issue among them; one named after a
// method of a type without column fields (the kernels' Table) keeps its name.
func TestReservedColumnNames(t *testing.T) {
	reserved := schema.ReservedColumnNames()
	for _, n := range []string{"PK", "ComparePK", "AppendKey", "AppendDistKey", "AppendValue", "Op", "Reserve"} {
		if !slices.Contains(reserved, n) {
			t.Errorf("%s is not reserved", n)
		}
	}
	tab := &schema.Table{Name: "t", PK: []schema.KeyColumn{{Column: 0}}}
	tab.Columns = append(tab.Columns, schema.Column{Name: "k", Type: schema.Type{Kind: schema.Int64}})
	for _, n := range append(reserved, "Table", "Mark", "Split") {
		tab.Columns = append(tab.Columns, schema.Column{Name: n, Type: schema.Type{Kind: schema.Int64}})
	}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range tab.Columns[1:] {
		want := c.Name
		if slices.Contains(reserved, c.Name) {
			want += "Col"
		}
		if c.GoName != want {
			t.Errorf("column %s: Go name %s, want %s", c.Name, c.GoName, want)
		}
	}
}

// TestCheckNames: File.CheckNames refuses tables built in code whose generated
// identifiers collide, naming the later table.
func TestCheckNames(t *testing.T) {
	mk := func(name string) *schema.Table {
		tab := &schema.Table{Name: name, Columns: []schema.Column{{Name: "x", Type: schema.Type{Kind: schema.Int64}}}, PK: []schema.KeyColumn{{Column: 0}}}
		if err := tab.Validate(); err != nil {
			t.Fatal(err)
		}
		return tab
	}
	good := &schema.File{Tables: []*schema.Table{mk("a"), mk("b")}}
	if err := good.CheckNames(); err != nil {
		t.Errorf("tables a and b: %v", err)
	}
	bad := &schema.File{Path: "s.yaml", Tables: []*schema.Table{mk("a"), mk("b"), mk("a_view")}}
	err := bad.CheckNames()
	if err == nil || !strings.HasPrefix(err.Error(), "s.yaml: a_view.name: generated Go name AView (the row struct) collides with table a's AView (the chunk view)") {
		t.Errorf("tables a and a_view: %v", err)
	}
}
