package gen_test

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/gen"
	"github.com/seed04fbb902/weir/schema"
)

// checkedIn lists every schema file in the repository with its generated package: a
// generated file that differs from what the generator makes now fails here, not only
// in CI.
var checkedIn = []struct{ schema, pkg string }{
	{"../bench/nexmark/tables/nexmark.yaml", "tables"},
	{"../internal/testschemas/testschemas.yaml", "testschemas"},
}

func TestCheckedInFilesAreCurrent(t *testing.T) {
	for _, c := range checkedIn {
		f, err := schema.ParseFile(c.schema)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := gen.Generate(f, c.pkg)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(c.schema)
		for _, o := range outs {
			disk, err := os.ReadFile(filepath.Join(dir, o.Name))
			if err != nil {
				t.Fatalf("%s: %v (run go generate ./...)", c.schema, err)
			}
			if !bytes.Equal(disk, o.Data) {
				t.Errorf("%s is stale: run go generate ./...", filepath.Join(dir, o.Name))
			}
		}
		// No generated file of this schema is left over from a removed table.
		onDisk, _ := filepath.Glob(filepath.Join(dir, "*.gen.go"))
		if len(onDisk) != len(outs) {
			t.Errorf("%s: %d generated files on disk, the schema makes %d", dir, len(onDisk), len(outs))
		}
	}
}

func TestDeterministic(t *testing.T) {
	f, err := schema.ParseFile(checkedIn[1].schema)
	if err != nil {
		t.Fatal(err)
	}
	a, err := gen.Generate(f, "p")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		// Parse afresh: nothing may depend on pointer identity or map order.
		f2, _ := schema.ParseFile(checkedIn[1].schema)
		b, err := gen.Generate(f2, "p")
		if err != nil {
			t.Fatal(err)
		}
		for j := range a {
			if a[j].Name != b[j].Name || !bytes.Equal(a[j].Data, b[j].Data) {
				t.Fatalf("run %d: %s differs", i, a[j].Name)
			}
		}
	}
}

// oddNames has columns named after Go keywords, in other spellings, and after methods
// of the generated view (op, pk, compare_pk: renamed OpCol, PKCol, ComparePKCol).
const oddNames = `tables:
  - name: odd_names
    columns:
      - {name: type, type: varchar}
      - {name: func, type: int64, nullable: true}
      - {name: range, type: "decimal(10,2)"}
      - {name: date_time, type: timestamptz, nullable: true}
      - {name: Extra, type: bytea}
      - {name: op, type: boolean}
      - {name: pk, type: int32}
      - {name: compare_pk, type: varchar, nullable: true}
    primary_key: ["type desc", "func nulls first", pk, compare_pk]
`

func TestOutputShape(t *testing.T) {
	f, err := schema.Parse("odd.yaml", []byte(oddNames))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := gen.Generate(f, "odd")
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Name != "odd_names.gen.go" {
		t.Fatalf("outputs %v", outs)
	}
	code := string(outs[0].Data)
	if !strings.HasPrefix(code, "// "+gen.Header+"\n") {
		t.Fatalf("missing header; starts %q", code[:60])
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "odd_names.gen.go", outs[0].Data, parser.ParseComments)
	if err != nil {
		t.Fatalf("generated code does not parse: %v", err)
	}
	if file.Name.Name != "odd" {
		t.Fatalf("package %s", file.Name.Name)
	}
	for _, want := range []string{
		"type OddNames struct", "Type ", "Func ", "Range ", "DateTime ", "Extra ", "OpCol ",
		"func NewOddNamesBuilder(", "type OddNamesView struct", "type OddNamesPK struct",
		"func DecodeOddNamesPK(", "func AppendOddNamesPK(", "OddNamesColOpCol", "PKCol ", "ComparePKCol ", "OddNamesColPKCol",
		"Source: odd.yaml, table odd_names.",
	} {
		if !strings.Contains(code, want) {
			t.Errorf("generated code lacks %q", want)
		}
	}
}

func TestBadPackageName(t *testing.T) {
	f, err := schema.Parse("x.yaml", []byte("tables:\n  - name: x\n    columns: [{name: a, type: int64}]\n    primary_key: [a]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Generate(f, "not-a-name"); err == nil {
		t.Fatal("want an error for a bad package name")
	}
}
