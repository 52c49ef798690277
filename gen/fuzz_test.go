package gen_test

import (
	"bytes"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/gen"
	"github.com/seed04fbb902/weir/schema"
)

// fuzzSchemaGlobs are the schema files FuzzGenerate is seeded from: the schema
// package's good and bad test files and every schema the repository generates code for.
var fuzzSchemaGlobs = []string{
	"../schema/testdata/*/*.yaml",
	"../bench/nexmark/tables/*.yaml",
	"../internal/testschemas/testschemas.yaml",
}

// fuzzPackages are package names the seeds are paired with: good ones and names Go
// refuses (empty, blank, keywords, not identifiers).
var fuzzPackages = []string{
	"p", "tables", "main", "ü", "_x", "",
	"_", "func", "type", "not-a-name", "1x", "a.b", "a b", "\xff",
}

// fuzzBadSchemas are small schemas the parser refuses or that hit the generator's own
// checks (two tables of one generated file name, file names Go's build rules restrict).
var fuzzBadSchemas = []string{
	"tables:\n  - name: abC\n    columns: [{name: a, type: int64}]\n    primary_key: [a]\n" +
		"  - name: abc\n    columns: [{name: a, type: int64}]\n    primary_key: [a]\n",
	"tables:\n  - name: app_android\n    columns: [{name: a, type: int64}]\n    primary_key: [a]\n",
	"tables:\n  - name: _x_test\n    columns: [{name: a, type: bool}]\n    primary_key: [a]\n",
	"tables:\n  - name: x\n    columns: [{name: a, type: \"decimal(39,1)\"}]\n    primary_key: [a]\n",
	"tables: [",
	"",
}

// maxFuzzColumns bounds the columns of an input FuzzGenerate renders, to keep each
// execution fast: rendering and checking a table takes milliseconds per column. The
// larger schema files are also seeded one table at a time (splitTables).
const maxFuzzColumns = 64

// splitTables returns a schema file of each table of a file written as a block list,
// "tables:" then a line "  - name: ..." starting each table (as the checked-in schemas
// are), or nil when the file is not in that form or has one table.
func splitTables(data []byte) [][]byte {
	lines := strings.SplitAfter(string(data), "\n")
	var out [][]byte
	var cur []string
	inTables := false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, []byte("tables:\n"+strings.Join(cur, "")))
		}
		cur = nil
	}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "tables:"):
			inTables = true
		case !inTables:
		case strings.HasPrefix(l, "  - "):
			flush()
			cur = append(cur, l)
		case cur != nil:
			cur = append(cur, l)
		}
	}
	flush()
	if len(out) < 2 {
		return nil
	}
	return out
}

// FuzzGenerate parses arbitrary bytes as a schema file and generates it into an
// arbitrary package. Generate never panics; it refuses a package name that is not a Go
// identifier (or is the blank one); otherwise it returns an error or one file per
// table, in table order, named FileName, starting with the generated-code header,
// parsing as Go in the package asked for and gofmt'ed.
func FuzzGenerate(f *testing.F) {
	for _, glob := range fuzzSchemaGlobs {
		files, err := filepath.Glob(glob)
		if err != nil {
			f.Fatal(err)
		}
		if len(files) == 0 {
			f.Fatalf("no schema files match %s", glob)
		}
		for i, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data, "p")
			f.Add(data, fuzzPackages[i%len(fuzzPackages)])
			for _, one := range splitTables(data) {
				if _, err := schema.Parse("fuzz.yaml", one); err == nil {
					f.Add(one, "p")
				}
			}
		}
	}
	small := []byte("tables:\n  - name: x\n    columns: [{name: a, type: int64}, {name: b, type: varchar, nullable: true}]\n    primary_key: [a]\n")
	for _, pkg := range fuzzPackages {
		f.Add(small, pkg)
	}
	for _, s := range fuzzBadSchemas {
		f.Add([]byte(s), "p")
	}
	f.Fuzz(func(t *testing.T, data []byte, pkg string) {
		file, err := schema.Parse("fuzz.yaml", data)
		if err != nil {
			return // FuzzParse checks the parser's errors
		}
		ncols := 0
		for _, tab := range file.Tables {
			ncols += len(tab.Columns)
		}
		if ncols > maxFuzzColumns {
			t.Skip("too many columns for one execution")
		}
		outs, err := gen.Generate(file, pkg)
		goodPkg := token.IsIdentifier(pkg) && pkg != "_"
		if err != nil {
			if outs != nil {
				t.Fatalf("Generate returned %d files and an error: %v", len(outs), err)
			}
			if !goodPkg && !strings.Contains(err.Error(), strconv.Quote(pkg)) {
				t.Fatalf("package %q: error %q does not name the package", pkg, err)
			}
			return
		}
		if !goodPkg {
			t.Fatalf("package %q is not a Go identifier, but Generate made %d files", pkg, len(outs))
		}
		if len(outs) != len(file.Tables) {
			t.Fatalf("%d tables, %d files", len(file.Tables), len(outs))
		}
		names := map[string]bool{}
		for i, o := range outs {
			tab := file.Tables[i]
			if want := gen.FileName(tab); o.Name != want || !strings.HasSuffix(o.Name, ".gen.go") {
				t.Fatalf("table %s: file %q, want %q", tab.Name, o.Name, want)
			}
			if names[o.Name] {
				t.Fatalf("two files named %s", o.Name)
			}
			names[o.Name] = true
			if !bytes.HasPrefix(o.Data, []byte("// "+gen.Header+"\n")) {
				t.Fatalf("%s: no generated-code header; starts %q", o.Name, o.Data[:min(len(o.Data), 80)])
			}
			fset := token.NewFileSet()
			ast, err := parser.ParseFile(fset, o.Name, o.Data, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("%s does not parse: %v\n%s", o.Name, err, o.Data)
			}
			if ast.Name.Name != pkg {
				t.Fatalf("%s: package %s, want %s", o.Name, ast.Name.Name, pkg)
			}
			// format.Node of the parsed file is format.Source (gofmt) without parsing again.
			var formatted bytes.Buffer
			if err := format.Node(&formatted, fset, ast); err != nil {
				t.Fatalf("%s: gofmt: %v", o.Name, err)
			}
			if !bytes.Equal(formatted.Bytes(), o.Data) {
				t.Fatalf("%s is not gofmt'ed", o.Name)
			}
		}
	})
}
