package schema_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/schema"
)

func TestGoName(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"type", "Type", ""},
		{"date_time", "DateTime", ""},
		{"DateTime", "DateTime", ""},
		{"Extra", "Extra", ""},
		{"id", "ID", ""},
		{"ID", "ID", ""},
		{"auction_id", "AuctionID", ""},
		{"auctionId", "AuctionID", ""},
		{"url", "URL", ""},
		{"item_url_2", "ItemURL2", ""},
		{"http_json_api", "HTTPJSONAPI", ""},
		{"op", "Op", ""}, // a column gets OpCol, see TestColumnGoName
		{"_x", "X", ""},
		{"a__b", "AB", ""},
		{"x1", "X1", ""},
		{"", "", "empty name"},
		{"1abc", "", "starts with a digit"},
		{"_1", "", "maps to \"1\", which starts with a digit"},
		{"a-b", "", "holds '-'"},
		{"a b", "", "holds ' '"},
		{"é", "", "only ASCII letters"},
		{"_", "", "no letters or digits"},
		{"__", "", "no letters or digits"},
	} {
		got, err := schema.GoName(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("GoName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("GoName(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
}

func TestColumnGoName(t *testing.T) {
	names := []string{"op", "row", "num_rows", "visible", "chunk", "len", "append", "build", "release", "reserve", "type", "id", "opx",
		"pk", "compare_pk", "append_key", "append_dist_key", "append_value", "table"}
	want := []string{"OpCol", "RowCol", "NumRowsCol", "VisibleCol", "ChunkCol", "LenCol", "AppendCol", "BuildCol", "ReleaseCol", "ReserveCol", "Type", "ID", "Opx",
		"PKCol", "ComparePKCol", "AppendKeyCol", "AppendDistKeyCol", "AppendValueCol", "Table"}
	tab := &schema.Table{Name: "t", PK: []schema.KeyColumn{{Column: 0}}}
	for _, n := range names {
		tab.Columns = append(tab.Columns, schema.Column{Name: n, Type: schema.Type{Kind: schema.Int64}})
	}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, c := range tab.Columns {
		if c.GoName != want[i] {
			t.Errorf("column %q: Go name %q, want %q", c.Name, c.GoName, want[i])
		}
	}
}

func TestParseType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want schema.Type
		err  string
	}{
		{"boolean", schema.Type{Kind: schema.Boolean}, ""},
		{"BOOL", schema.Type{Kind: schema.Boolean}, ""},
		{"smallint", schema.Type{Kind: schema.Int16}, ""},
		{"int", schema.Type{Kind: schema.Int32}, ""},
		{" integer ", schema.Type{Kind: schema.Int32}, ""},
		{"bigint", schema.Type{Kind: schema.Int64}, ""},
		{"real", schema.Type{Kind: schema.Float32}, ""},
		{"double", schema.Type{Kind: schema.Float64}, ""},
		{"text", schema.Type{Kind: schema.Varchar}, ""},
		{"bytea", schema.Type{Kind: schema.Bytea}, ""},
		{"date", schema.Type{Kind: schema.Date}, ""},
		{"timestamp", schema.Type{Kind: schema.Timestamp}, ""},
		{"TimestampTZ", schema.Type{Kind: schema.Timestamptz}, ""},
		{"decimal(12,2)", schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 2}, ""},
		{"decimal( 5 , 0 )", schema.Type{Kind: schema.Decimal, Precision: 5}, ""},
		{"DECIMAL(7)", schema.Type{Kind: schema.Decimal, Precision: 7}, ""},
		{"decimal(38,38)", schema.Type{Kind: schema.Decimal, Precision: 38, Scale: 38}, ""},
		{"decimal(1,0)", schema.Type{Kind: schema.Decimal, Precision: 1}, ""},
		{"decimal(39,0)", schema.Type{}, "decimal precision 39 out of range 1..38"},
		{"decimal(0,0)", schema.Type{}, "decimal precision 0 out of range"},
		{"decimal(5,6)", schema.Type{}, "decimal scale 6 larger than precision 5"},
		{"decimal(5,-1)", schema.Type{}, "bad decimal type"},
		{"decimal", schema.Type{}, "bad decimal type"},
		{"decimal(99999999999999999999999)", schema.Type{}, "out of range"},
		{"float", schema.Type{}, "unknown type \"float\" (want one of boolean, int16"},
		{"", schema.Type{}, "unknown type"},
		{"varchar(10)", schema.Type{}, "unknown type"},
	} {
		got, err := schema.ParseType(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseType(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseType(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.err)
		}
		// Every valid type prints as text that parses back to it.
		if err == nil {
			if again, err := schema.ParseType(got.String()); err != nil || again != got {
				t.Errorf("ParseType(%q.String() = %q) = %+v, %v", tc.in, got.String(), again, err)
			}
		}
	}
}

func TestParseKeySpec(t *testing.T) {
	for _, tc := range []struct {
		in               string
		col              string
		desc, nullsFirst bool
		err              bool
	}{
		{"a", "a", false, false, false},
		{"a asc", "a", false, false, false},
		{"a ASC", "a", false, false, false},
		{"a desc", "a", true, true, false},
		{"a desc nulls last", "a", true, false, false},
		{"a asc nulls first", "a", false, true, false},
		{"a nulls first", "a", false, true, false},
		{"a Nulls Last", "a", false, false, false},
		{"  a   desc  ", "a", true, true, false},
		{"", "", false, false, true},
		{"a sideways", "", false, false, true},
		{"a desc nulls", "", false, false, true},
		{"a nulls middle", "", false, false, true},
		{"a desc nulls first extra", "", false, false, true},
		{"a asc desc", "", false, false, true},
	} {
		col, desc, nf, err := schema.ParseKeySpec(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("ParseKeySpec(%q) = %q %v %v, want an error", tc.in, col, desc, nf)
			}
			continue
		}
		if err != nil || col != tc.col || desc != tc.desc || nf != tc.nullsFirst {
			t.Errorf("ParseKeySpec(%q) = %q %v %v %v; want %q %v %v", tc.in, col, desc, nf, err, tc.col, tc.desc, tc.nullsFirst)
		}
	}
}

func TestTypeInfo(t *testing.T) {
	widths := map[schema.Kind]int{
		schema.Boolean: 1, schema.Int16: 2, schema.Int32: 4, schema.Int64: 8, schema.Float32: 4, schema.Float64: 8,
		schema.Decimal: 16, schema.Varchar: 0, schema.Bytea: 0, schema.Date: 4, schema.Timestamp: 8, schema.Timestamptz: 8,
	}
	if len(schema.Kinds) != len(widths) {
		t.Fatalf("%d kinds, %d in this test", len(schema.Kinds), len(widths))
	}
	for _, k := range schema.Kinds {
		typ := schema.Type{Kind: k, Precision: 10, Scale: 2}
		if typ.Width() != widths[k] || typ.VarLen() != (widths[k] == 0) {
			t.Errorf("%s: width %d varlen %v", k, typ.Width(), typ.VarLen())
		}
		at := typ.ArrowType()
		if fw, ok := at.(arrow.FixedWidthDataType); ok && k != schema.Boolean && fw.BitWidth() != 8*typ.Width() {
			t.Errorf("%s: Arrow type %s is %d bits wide, the value slot %d bytes", k, at, fw.BitWidth(), typ.Width())
		}
	}
	if got := (schema.Type{Kind: schema.Timestamptz}).ArrowType().(*arrow.TimestampType); got.Unit != arrow.Microsecond || got.TimeZone != "UTC" {
		t.Errorf("timestamptz: %s", got)
	}
	if got := (schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 2}).ArrowType().(*arrow.Decimal128Type); got.Precision != 12 || got.Scale != 2 {
		t.Errorf("decimal: %s", got)
	}
	if schema.Kind(99).String() != "kind(99)" || schema.Invalid.String() != "invalid" {
		t.Error("Kind.String")
	}
	defer func() {
		if recover() == nil {
			t.Error("ArrowType of an invalid kind did not panic")
		}
	}()
	schema.Type{}.ArrowType()
}

// fixedTable is a table built in code whose fingerprint TestFingerprintStable pins.
func fixedTable() *schema.Table {
	return &schema.Table{
		Name: "bid",
		Columns: []schema.Column{
			{Name: "auction", Type: schema.Type{Kind: schema.Int64}},
			{Name: "price", Type: schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 2}},
			{Name: "date_time", Type: schema.Type{Kind: schema.Timestamp}, Nullable: true},
			{Name: "extra", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		},
		PK:      []schema.KeyColumn{{Column: 0}, {Column: 2, Desc: true, NullsFirst: true}},
		DistKey: []int{0},
	}
}

func TestFingerprintStable(t *testing.T) {
	tab := fixedTable()
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	const canon = "table bid vnodes 256\n" +
		"column auction int64 nullable=false\n" +
		"column price decimal(12,2) nullable=false\n" +
		"column date_time timestamp nullable=true\n" +
		"column extra varchar nullable=true\n" +
		"pk auction asc nulls last\n" +
		"pk date_time desc nulls first\n" +
		"dist auction\n"
	if got := tab.Canonical(); got != canon {
		t.Fatalf("Canonical:\n%s\nwant\n%s", got, canon)
	}
	const fp = "22896f3bf7f22773a610858a"
	if got := tab.Fingerprint(); got != fp {
		t.Errorf("Fingerprint() = %s, want %s (a fingerprint must never change for a given shape)", got, fp)
	}
	// Everything in the canonical form changes the fingerprint; where the table was
	// declared does not.
	base := tab.Fingerprint()
	for name, change := range map[string]func(*schema.Table){
		"name":       func(t *schema.Table) { t.Name = "bid2" },
		"vnodes":     func(t *schema.Table) { t.VnodeCount = 8 },
		"nullable":   func(t *schema.Table) { t.Columns[0].Nullable = true },
		"type":       func(t *schema.Table) { t.Columns[1].Type.Scale = 3 },
		"column":     func(t *schema.Table) { t.Columns[3].Name = "extra2" },
		"pk order":   func(t *schema.Table) { t.PK[0].Desc = true },
		"pk nulls":   func(t *schema.Table) { t.PK[1].NullsFirst = false },
		"pk columns": func(t *schema.Table) { t.PK = t.PK[:1] },
		"dist":       func(t *schema.Table) { t.DistKey = []int{0, 2} },
	} {
		other := fixedTable()
		change(other)
		if err := other.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if other.Fingerprint() == base {
			t.Errorf("changing the %s keeps the fingerprint", name)
		}
	}
	other := fixedTable()
	other.File, other.Line = "x.yaml", 3
	if other.Validate(); other.Fingerprint() != base {
		t.Error("the declaring file changes the fingerprint")
	}
}

// TestValidateInCode checks the rules for tables built in code; errors name the table
// and field, with no file.
func TestValidateInCode(t *testing.T) {
	i64 := schema.Type{Kind: schema.Int64}
	for _, tc := range []struct {
		name string
		tab  schema.Table
		want string // "" = valid
	}{
		{"valid", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}}, ""},
		{"no name", schema.Table{Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}}, "name: missing: every table has a name"},
		{"bad table name", schema.Table{Name: "a-b", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}}, "a-b.name: name \"a-b\" holds '-'"},
		{"no columns", schema.Table{Name: "t", PK: []schema.KeyColumn{{Column: 0}}}, "t.columns: a table has at least one column"},
		{"no type", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a"}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns.a.type: missing or invalid type"},
		{"bad kind", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: schema.Type{Kind: 77}}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns.a.type: missing or invalid type"},
		{"bad decimal", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}, {Name: "d", Type: schema.Type{Kind: schema.Decimal, Precision: 40}}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns.d.type: bad decimal(40,0)"},
		{"negative scale", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}, {Name: "d", Type: schema.Type{Kind: schema.Decimal, Precision: 4, Scale: -1}}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns.d.type: bad decimal(4,-1)"},
		{"no pk", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}}, "t.primary_key: missing"},
		{"pk out of range", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 1}}}, "t.primary_key[0]: column index 1 out of range"},
		{"pk twice", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}, {Column: 0, Desc: true}}}, "t.primary_key[1]: column \"a\" appears twice"},
		{"dist outside pk", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}, {Name: "b", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}, DistKey: []int{1}}, "t.distribution_key[0]: column \"b\" is not in the primary key"},
		{"dist out of range", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}, DistKey: []int{-1}}, "t.distribution_key[0]: column index -1 out of range"},
		{"dist twice", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}, DistKey: []int{0, 0}}, "t.distribution_key[1]: column \"a\" appears twice"},
		{"vnodes negative", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: -1}, "t.vnodes: vnode count -1 out of range 1..32768"},
		{"vnodes too many", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 32769}, "t.vnodes: vnode count 32769 out of range"},
		{"vnodes max", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 32768}, ""},
		{"duplicate column", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}, {Name: "a", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns.a: duplicate column \"a\""},
		{"Go name clash", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a_b", Type: i64}, {Name: "aB", Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns.aB.name: maps to Go name AB, as column \"a_b\" does"},
		{"empty column name", schema.Table{Name: "t", Columns: []schema.Column{{Name: "a", Type: i64}, {Type: i64}}, PK: []schema.KeyColumn{{Column: 0}}}, "t.columns[1].name: missing"},
	} {
		tab := tc.tab
		err := tab.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: valid, want %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %q, want %q", tc.name, err, tc.want)
		case tc.want != "" && strings.Contains(err.Error(), ".yaml"):
			t.Errorf("%s: %q names a file", tc.name, err)
		}
		if tc.want == "" {
			if tab.VnodeCount == 0 || len(tab.DistKey) == 0 || tab.GoName == "" {
				t.Errorf("%s: defaults not filled: %+v", tc.name, tab)
			}
		}
	}
}

func TestTableHelpers(t *testing.T) {
	tab := fixedTable()
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	if i, ok := tab.ColumnIndex("date_time"); !ok || i != 2 {
		t.Errorf("ColumnIndex(date_time) = %d %v", i, ok)
	}
	if _, ok := tab.ColumnIndex("nope"); ok {
		t.Error("ColumnIndex found a missing column")
	}
	if got := tab.PKColumns(); len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Errorf("PKColumns() = %v", got)
	}
	if !tab.IsPK(2) || tab.IsPK(1) {
		t.Error("IsPK")
	}
	s := tab.ArrowSchema()
	if s.NumFields() != 4 || s.Field(1).Name != "price" || s.Field(2).Nullable != true || s.Field(0).Nullable {
		t.Errorf("ArrowSchema: %s", s)
	}
	p := tab.ProjectedArrowSchema([]int{3, 0})
	if p.NumFields() != 2 || p.Field(0).Name != "extra" || !arrow.TypeEqual(p.Field(1).Type, arrow.PrimitiveTypes.Int64) {
		t.Errorf("ProjectedArrowSchema: %s", p)
	}
	e := &schema.Error{Field: "t.x", Reason: "bad"}
	if e.Error() != "t.x: bad" {
		t.Errorf("Error without a file: %q", e.Error())
	}
	e = &schema.Error{File: "f.yaml", Reason: "bad"}
	if e.Error() != "f.yaml: bad" {
		t.Errorf("Error without a line or field: %q", e.Error())
	}
	if (schema.ErrorList{}).Err() != nil {
		t.Error("empty ErrorList.Err() != nil")
	}
}

func TestParseFileMissing(t *testing.T) {
	_, err := schema.ParseFile("testdata/does_not_exist.yaml")
	if err == nil || !strings.Contains(err.Error(), "does_not_exist.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
