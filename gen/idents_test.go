package gen_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/gen"
	"github.com/seed04fbb902/weir/schema"
)

// TestDeclaredIdentsAreTheTable checks that every generated file declares exactly the
// identifiers of schema's table of generated identifiers (schema.Idents, the column
// constants and each type's methods): an identifier the generator declares without
// the table would escape the clash checks, and TestGeneratedNamesCompileOrAreRefused
// builds its cases from the table.
func TestDeclaredIdentsAreTheTable(t *testing.T) {
	odd, err := schema.Parse("odd.yaml", []byte(oddNames))
	if err != nil {
		t.Fatal(err)
	}
	files := []*schema.File{odd}
	for _, c := range checkedIn {
		f, err := schema.ParseFile(c.schema)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for _, f := range files {
		outs, err := gen.Generate(f, "p")
		if err != nil {
			t.Fatal(err)
		}
		for i, tab := range f.Tables {
			want := map[string]bool{}
			wantMethods := map[string]bool{}
			for _, id := range schema.Idents() {
				want[tab.Ident(id)] = true
				for _, m := range id.Methods() {
					wantMethods[tab.Ident(id)+"."+m] = true
				}
			}
			for j := range tab.Columns {
				want[tab.ColumnIdent(j)] = true
			}
			got, gotMethods := declarations(t, outs[i])
			compareSets(t, outs[i].Name+": package-level identifiers", got, want)
			compareSets(t, outs[i].Name+": methods", gotMethods, wantMethods)
		}
	}
}

// declarations lists a generated file's package-level identifiers (but init and _,
// which cannot collide) and its methods as "Type.Method".
func declarations(t *testing.T, o gen.Output) (idents, methods map[string]bool) {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), o.Name, o.Data, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s does not parse: %v", o.Name, err)
	}
	idents, methods = map[string]bool{}, map[string]bool{}
	for _, n := range declared(t, o) {
		if idents[n] {
			t.Errorf("%s: %s declared twice", o.Name, n)
		}
		idents[n] = true
	}
	for _, d := range file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil {
			continue
		}
		recv := fd.Recv.List[0].Type
		if star, ok := recv.(*ast.StarExpr); ok {
			recv = star.X
		}
		methods[recv.(*ast.Ident).Name+"."+fd.Name.Name] = true
	}
	return idents, methods
}

func compareSets(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	for _, n := range slices.Sorted(maps.Keys(got)) {
		if !want[n] {
			t.Errorf("%s: %s is declared but not in schema's table of generated identifiers", what, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if !got[n] {
			t.Errorf("%s: %s is in schema's table but not declared", what, n)
		}
	}
}

// TestFileNames checks that every generated file name is built on every platform go
// tool dist lists: a table named after a system or an architecture (x_windows,
// x_amd64, x_linux_amd64, x_js_test) or with a leading underscore gets a file name that
// Go's build rules neither restrict nor ignore, and other names keep <name>.gen.go.
func TestFileNames(t *testing.T) {
	pairs, parts := platformParts(t)
	names := []string{"_x", "__x", "_x_linux"}
	for _, p := range parts {
		names = append(names, "x_"+p, "x_"+p+"_test", strings.ToUpper("x_"+p))
	}
	for _, p := range pairs {
		names = append(names, "x_"+p[0]+"_"+p[1], "x_"+p[0]+"_"+p[1]+"_test")
	}
	ctxt := build.Default
	ctxt.OpenFile = func(string) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("package p\n")), nil
	}
	for _, n := range names {
		name := gen.FileName(&schema.Table{Name: n})
		for _, p := range pairs {
			ctxt.GOOS, ctxt.GOARCH = p[0], p[1]
			if ok, err := ctxt.MatchFile(".", name); err != nil || !ok {
				t.Errorf("table %s: file %s is not built for %s/%s (%v)", n, name, p[0], p[1], err)
				break
			}
		}
	}
	for _, c := range []struct{ table, file string }{
		{"bid", "bid.gen.go"},
		{"Bid", "bid.gen.go"},
		{"x_test", "x_test.gen.go"},
		{"x_unix", "x_unix.gen.go"},
		{"date_time", "date_time.gen.go"},
		{"x_windows", "x_windows_table.gen.go"},
		{"_x", "x.gen.go"},
	} {
		if got := gen.FileName(&schema.Table{Name: c.table}); got != c.file {
			t.Errorf("FileName(%s) = %s, want %s", c.table, got, c.file)
		}
	}
}
