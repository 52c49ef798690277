package gen_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/gen"
	"github.com/seed04fbb902/weir/schema"
)

// nameCase is a schema file built so that a table or column maps onto one identifier:
// one the generator declares (from schema's table of generated identifiers), one Go
// predeclares, one the generated code uses, or a file name Go's build rules treat
// specially. Each must generate code that compiles or be refused with
// "file:line: field: reason".
type nameCase struct {
	what     string // the identifier or name it maps to, for messages
	tables   []caseTable
	offender int // with two tables: the one a refusal must name (the later); -1 if any
}

type caseTable struct {
	name string
	cols []string
	pk   int // the pk is the first pk columns; 0: all of them
}

// yaml renders the case's schema file and the line of each table.
func (c nameCase) yaml() (string, []int) {
	var b strings.Builder
	b.WriteString("tables:\n")
	line, n := 2, 0
	var lines []int
	for _, t := range c.tables {
		lines = append(lines, line)
		fmt.Fprintf(&b, "  - name: %q\n    columns:\n", t.name)
		line += 2
		npk := t.pk
		if npk == 0 {
			npk = len(t.cols)
		}
		pk := make([]string, npk)
		for i, col := range t.cols {
			k := schema.Kinds[n%len(schema.Kinds)]
			n++
			typ := k.String()
			if k == schema.Decimal {
				typ = "decimal(20,4)"
			}
			fmt.Fprintf(&b, "      - {name: %q, type: %q, nullable: %v}\n", col, typ, i%2 == 1)
			if i < npk {
				pk[i] = fmt.Sprintf("%q", col)
			}
			line++
		}
		fmt.Fprintf(&b, "    primary_key: [%s]\n", strings.Join(pk, ", "))
		line++
	}
	return b.String(), lines
}

// goName is schema.GoName for a name known to be valid.
func goName(t *testing.T, name string) string {
	t.Helper()
	g, err := schema.GoName(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// named is a table with only its Go names set: enough to spell its identifiers.
func named(t *testing.T, name string, cols ...string) *schema.Table {
	tab := &schema.Table{Name: name, GoName: goName(t, name)}
	for _, c := range cols {
		tab.Columns = append(tab.Columns, schema.Column{Name: c, GoName: goName(t, c)})
	}
	return tab
}

// mapsTo checks that a case really maps onto the identifier it is about.
func mapsTo(t *testing.T, got, want, why string) {
	t.Helper()
	if got != want {
		t.Fatalf("test case %s: maps to %s, not %s", why, got, want)
	}
}

// identCases: for every generated identifier, a second table whose identifiers
// collide with the first's on it. An exported one is the Go name of a table named
// after it ("Tbl3Kernels" beside "tbl3"); an unexported one (built on <t>) comes from
// a table whose name lowers to the same <t> ("ABCa" beside "ab_ca", both abCa). Columns cannot map
// to an unexported identifier (column Go names are exported), but a column may be
// named after each exported one of its own table.
func identCases(t *testing.T) []nameCase {
	var out []nameCase
	own := caseTable{name: "own", cols: []string{"x"}, pk: 1}
	for k, id := range schema.Idents() {
		if id.Exported() {
			base := fmt.Sprintf("tbl%d", k)
			ident := named(t, base).Ident(id)
			mapsTo(t, goName(t, ident), ident, "table "+ident)
			out = append(out, nameCase{what: fmt.Sprintf("table named %s (%s)", ident, id),
				tables: []caseTable{{name: base, cols: []string{"x"}}, {name: ident, cols: []string{"x"}}}, offender: 1})
			col := named(t, own.name).Ident(id)
			mapsTo(t, goName(t, col), col, "column "+col)
			own.cols = append(own.cols, col)
			continue
		}
		l := string(rune('a' + k))
		lo, hi := "ab_c"+l, "ABC"+l // AbC<l> and ABC<l>, both abC<l>, in different files
		mapsTo(t, named(t, hi).Ident(id), named(t, lo).Ident(id), fmt.Sprintf("tables %s and %s", lo, hi))
		out = append(out, nameCase{what: fmt.Sprintf("%s (%s) of tables %s and %s", named(t, lo).Ident(id), id, lo, hi),
			tables: []caseTable{{name: lo, cols: []string{"x"}}, {name: hi, cols: []string{"x"}}}, offender: 1})
	}
	out = append(out, nameCase{what: "columns named after their table's identifiers", tables: []caseTable{own}, offender: -1})
	// The index constants <T>Col<C>: a table named after another's, in both orders.
	ident := named(t, "cc", "x").ColumnIdent(0)
	mapsTo(t, goName(t, ident), ident, "table "+ident)
	cc, other := caseTable{name: "cc", cols: []string{"x"}}, caseTable{name: ident, cols: []string{"y"}}
	for _, order := range [][]caseTable{{cc, other}, {other, cc}} {
		out = append(out, nameCase{what: fmt.Sprintf("table %s, then table %s (column constant)", order[0].name, order[1].name),
			tables: order, offender: 1})
	}
	return out
}

// methodCases: a table with a column named after every method of every generated
// type, all in the pk (so that they are in every generated struct); and for each
// method that is a reserved column name, that column beside one named after its
// renamed form.
func methodCases(t *testing.T) []nameCase {
	methods := caseTable{name: "methods"}
	var out []nameCase
	for _, id := range schema.Idents() {
		for _, m := range id.Methods() {
			mapsTo(t, goName(t, m), m, "column "+m)
			if !slices.Contains(methods.cols, m) {
				methods.cols = append(methods.cols, m)
			}
		}
	}
	out = append(out, nameCase{what: "columns named after the generated methods", tables: []caseTable{methods}, offender: -1})
	for _, m := range schema.ReservedColumnNames() {
		out = append(out, nameCase{what: fmt.Sprintf("columns %s and %sCol", m, m),
			tables: []caseTable{{name: "mc_" + m, cols: []string{"x", m, m + "Col"}}}, offender: -1})
	}
	return out
}

// goNames returns every name Go or the generated code gives a meaning to: the
// keywords, the predeclared identifiers and every identifier in the generated code of
// the checked-in test schemas (its imports, locals, fields, methods and the selectors
// of what it calls) except those spelt from the schema's names; and, of those, the
// predeclared ones and the names under which generated code imports its packages.
func goNames(t *testing.T) (all, special []string) {
	set := map[string]bool{}
	for tok := token.Token(0); tok < 256; tok++ {
		if tok.IsKeyword() {
			set[tok.String()] = true
		}
	}
	special = types.Universe.Names()
	f, err := schema.ParseFile(checkedIn[1].schema)
	if err != nil {
		t.Fatal(err)
	}
	fromSchema := map[string]bool{}
	for _, tab := range f.Tables {
		for _, id := range schema.Idents() {
			fromSchema[tab.Ident(id)] = true
		}
		for i, c := range tab.Columns {
			fromSchema[tab.ColumnIdent(i)], fromSchema[c.GoName], fromSchema["c"+c.GoName] = true, true, true
		}
	}
	outs, err := gen.Generate(f, checkedIn[1].pkg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		file, err := parser.ParseFile(token.NewFileSet(), o.Name, o.Data, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && !fromSchema[id.Name] {
				set[id.Name] = true
			}
			return true
		})
		for _, name := range importNames(t, file) {
			if !slices.Contains(special, name) {
				special = append(special, name)
			}
		}
	}
	delete(set, checkedIn[1].pkg)
	for _, n := range special {
		set[n] = true
	}
	return slices.Sorted(maps.Keys(set)), special
}

// goNameCases: wide tables with a column named after each Go name (names with one Go
// name, such as append and Append, need one column), and a table named after each
// predeclared identifier and imported package name.
func goNameCases(t *testing.T, all, special []string) []nameCase {
	const width = 100
	var out []nameCase
	seen := map[string]bool{}
	var cols []string
	flush := func() {
		out = append(out, nameCase{what: fmt.Sprintf("columns named %s ... %s", cols[0], cols[len(cols)-1]),
			tables: []caseTable{{name: fmt.Sprintf("go_names_%d", len(out)), cols: cols, pk: 2}}, offender: -1})
		cols = nil
	}
	for _, n := range all {
		g, err := schema.GoName(n)
		if err != nil || seen[g] {
			continue // "_" and the like are no schema names
		}
		seen[g] = true
		if cols = append(cols, n); len(cols) == width {
			flush()
		}
	}
	if len(cols) > 0 {
		flush()
	}
	for _, n := range special {
		if _, err := schema.GoName(n); err == nil {
			out = append(out, nameCase{what: "table named " + n, tables: []caseTable{{name: n, cols: []string{"x"}}}, offender: -1})
		}
	}
	return out
}

// platformParts lists every system and architecture go tool dist lists.
func platformParts(t *testing.T) (pairs [][2]string, parts []string) {
	list, err := exec.Command("go", "tool", "dist", "list").Output()
	if err != nil {
		t.Fatalf("go tool dist list: %v", err)
	}
	set := map[string]bool{}
	for _, l := range strings.Fields(string(list)) {
		goos, goarch, _ := strings.Cut(l, "/")
		pairs = append(pairs, [2]string{goos, goarch})
		set[goos], set[goarch] = true, true
	}
	return pairs, slices.Sorted(maps.Keys(set))
}

// fileNameCases: tables whose file names Go's build rules would read as a build
// constraint of a system or an architecture other than this one (TestFileNames checks
// every one) or ignore, and tables whose file names collide.
func fileNameCases(t *testing.T) []nameCase {
	_, parts := platformParts(t)
	var out []nameCase
	one := func(name string) {
		out = append(out, nameCase{what: "table named " + name, tables: []caseTable{{name: name, cols: []string{"x"}}}, offender: -1})
	}
	var goos, goarch string
	for _, p := range parts {
		switch p {
		case runtime.GOOS, runtime.GOARCH:
		case "windows", "js", "plan9":
			goos = p
		case "wasm", "riscv64", "s390x":
			goarch = p
		}
	}
	one("f_" + goos)
	one("f_" + goos + "_" + goarch + "_test")
	one("_lead")
	pair := func(a, b string) {
		out = append(out, nameCase{what: fmt.Sprintf("tables %s and %s (file names)", a, b),
			tables: []caseTable{{name: a, cols: []string{"x"}}, {name: b, cols: []string{"x"}}}, offender: 1})
	}
	pair("fabC", "fabc")
	pair("g_"+goos, "g_"+goos+"_table")
	pair("lead2", "_lead2")
	return out
}

// declared is every package-level identifier a generated file declares, but init
// functions and blank names, which cannot collide.
func declared(t *testing.T, o gen.Output) []string {
	file, err := parser.ParseFile(token.NewFileSet(), o.Name, o.Data, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s does not parse: %v", o.Name, err)
	}
	var out []string
	add := func(id *ast.Ident) {
		if id.Name != "_" {
			out = append(out, id.Name)
		}
	}
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.Name != "init" {
				add(d.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					add(s.Name)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						add(n)
					}
				}
			}
		}
	}
	return out
}

// batch is one package of generated files whose identifiers and file names are
// disjoint.
type batch struct {
	pkg     string
	names   map[string]bool
	files   map[string]string // file name -> the case it comes from
	outs    []gen.Output
	kernels []string // <T>Kernels of every table: uses.go refers to each, so a file the go command skips fails
	users   []string // the case of each of kernels
}

var schemaErr = regexp.MustCompile(`^(case\d+\.yaml):(\d+): (\S+): (.+)$`)

// TestGeneratedNamesCompileOrAreRefused builds, from schema's table of generated
// identifiers and from Go's and the generated code's own names, a schema for every
// identifier that maps a table or column onto it (see the *Cases functions), and
// checks that each is refused with "file:line: field: reason" or generates code that
// compiles: the generated files of all accepted cases go into a few packages under
// testdata (as few as their identifiers allow), type-checked by one go vet.
func TestGeneratedNamesCompileOrAreRefused(t *testing.T) {
	start := time.Now()
	all, special := goNames(t)
	var cases []nameCase
	cases = append(cases, nameCase{what: "control", tables: []caseTable{{name: "control", cols: []string{"x", "y", "z"}}}, offender: -1})
	cases = append(cases, identCases(t)...)
	cases = append(cases, methodCases(t)...)
	cases = append(cases, goNameCases(t, all, special)...)
	cases = append(cases, fileNameCases(t)...)

	// Package names of the batches: predeclared and imported names, which a package
	// of generated files may well have.
	pkgs := special
	var batches []*batch
	refused := 0
	for i, c := range cases {
		path := fmt.Sprintf("case%d.yaml", i)
		src, lines := c.yaml()
		f, err := schema.Parse(path, []byte(src))
		var outs []gen.Output
		if err == nil {
			outs, err = gen.Generate(f, "p")
		}
		if err != nil && i == 0 {
			t.Fatalf("the control case is refused: %v", err)
		}
		if err != nil {
			refused++
			checkRefusal(t, c, path, src, lines, err)
			continue
		}
		var names []string
		files := map[string]bool{}
		for _, o := range outs {
			if files[o.Name] {
				t.Errorf("%s: two generated files named %s", c.what, o.Name)
			}
			files[o.Name] = true
			names = append(names, declared(t, o)...)
		}
		var b *batch
		for _, cand := range batches {
			if !slices.ContainsFunc(names, func(n string) bool { return cand.names[n] }) &&
				!slices.ContainsFunc(outs, func(o gen.Output) bool { _, ok := cand.files[o.Name]; return ok }) {
				b = cand
				break
			}
		}
		if b == nil {
			b = &batch{pkg: pkgs[len(batches)%len(pkgs)], names: map[string]bool{}, files: map[string]string{}}
			batches = append(batches, b)
		}
		for j := range outs {
			outs[j].Data = rename(t, outs[j].Data, b.pkg)
		}
		for _, n := range names {
			b.names[n] = true
		}
		for _, o := range outs {
			b.files[o.Name] = c.what
		}
		b.outs = append(b.outs, outs...)
		for _, tab := range f.Tables {
			b.kernels = append(b.kernels, tab.Ident(schema.IdentKernelsFunc))
			b.users = append(b.users, c.what)
		}
	}
	compileBatches(t, batches)
	t.Logf("%d cases: %d refused, %d generated into %d packages; %v", len(cases), refused, len(cases)-refused, len(batches), time.Since(start).Round(time.Millisecond))
}

// checkRefusal checks that every problem of a refused case is "file:line: field:
// reason" naming one of its tables (the later one of a clash) at one of its lines.
func checkRefusal(t *testing.T, c nameCase, path, src string, lines []int, err error) {
	t.Helper()
	var list schema.ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Errorf("%s: refused with %v (%T), want a schema.ErrorList", c.what, err, err)
		return
	}
	end := strings.Count(src, "\n") + 1
	for _, e := range list {
		m := schemaErr.FindStringSubmatch(e.Error())
		if m == nil || m[1] != path || e.Line <= 0 || e.Reason == "" {
			t.Errorf("%s: refused with %q, want file:line: field: reason", c.what, e.Error())
			continue
		}
		from, to := 0, len(lines)
		if c.offender >= 0 {
			from, to = c.offender, c.offender+1
		}
		ok := false
		for i := from; i < to; i++ {
			last := end
			if i+1 < len(lines) {
				last = lines[i+1]
			}
			if e.Line >= lines[i] && e.Line < last && strings.HasPrefix(e.Field, c.tables[i].name+".") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: refused with %q, which does not name the offending table at its lines\n%s", c.what, e.Error(), src)
		}
	}
}

// rename moves a generated file from package p to pkg: the generator makes the same
// file for any package name but for the package clause.
func rename(t *testing.T, data []byte, pkg string) []byte {
	const clause = "\npackage p\n"
	if !bytes.Contains(data, []byte(clause)) {
		t.Fatalf("no %q in generated code", clause)
	}
	return bytes.Replace(data, []byte(clause), []byte("\npackage "+pkg+"\n"), 1)
}

// importNames lists the names under which a file imports its packages.
func importNames(t *testing.T, file *ast.File) []string {
	var out []string
	for _, imp := range file.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		name := p[strings.LastIndexByte(p, '/')+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		out = append(out, name)
	}
	return out
}

var compileErr = regexp.MustCompile(`(b\d+)/([\w.]+\.go):(\d+):\d+: `)

const usesLine = 5 // the first line of uses.go that names a table

// compileBatches writes each batch as a package under testdata (which ./... skips) and
// type-checks them all with one go command; an error is reported with the case of its
// file.
func compileBatches(t *testing.T, batches []*batch) {
	t.Helper()
	if _, err := os.Stat("testdata"); os.IsNotExist(err) {
		if err := os.Mkdir("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("testdata") })
	}
	dir, err := os.MkdirTemp("testdata", "names-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var pkgs []string
	for i, b := range batches {
		pdir := filepath.Join(dir, fmt.Sprintf("b%d", i))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, o := range b.outs {
			if err := os.WriteFile(filepath.Join(pdir, o.Name), o.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Line usesLine+j refers to table j's kernels function.
		uses := fmt.Sprintf("package %s\n\n// Every table's file is compiled.\nvar _ = []any{\n\t%s,\n}\n", b.pkg, strings.Join(b.kernels, ",\n\t"))
		if err := os.WriteFile(filepath.Join(pdir, "uses.go"), []byte(uses), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pdir))
	}
	// go vet type-checks the packages: a tenth of the time the compiler's back end
	// takes over this much generated code, and every naming error is a type error.
	// It stops at a package's first error, though; then go build -gcflags=-e lists
	// them all, so that no case hides another's.
	vet, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput()
	if err == nil {
		return
	}
	args := append([]string{"build", "-gcflags=-e"}, pkgs...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err == nil {
		t.Fatalf("go vet fails, go %s does not:\n%s", strings.Join(args, " "), vet)
	}
	byCase := map[string][]string{}
	var other []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		m := compileErr.FindStringSubmatch(l)
		if m == nil {
			other = append(other, l)
			continue
		}
		var i int
		fmt.Sscanf(m[1], "b%d", &i)
		what, ok := batches[i].files[m[2]]
		if line, _ := strconv.Atoi(m[3]); m[2] == "uses.go" && line >= usesLine && line-usesLine < len(batches[i].users) {
			what, ok = batches[i].users[line-usesLine], true
		}
		if !ok {
			what = m[1] + "/" + m[2]
		}
		byCase[what] = append(byCase[what], l)
	}
	for _, what := range slices.Sorted(maps.Keys(byCase)) {
		t.Errorf("%s: generated code does not compile:\n%s", what, strings.Join(byCase[what], "\n"))
	}
	if len(byCase) == 0 {
		t.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, strings.Join(other, "\n"))
	}
}
