package schema_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/schema"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs under testdata/ instead of comparing with them")

// checkGolden compares got with the file at path, or writes it there with -rewrite.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

var errLine = regexp.MustCompile(`^testdata/bad/[a-z_]+\.yaml:[0-9]+: `)

// TestParseBad parses every testdata/bad/*.yaml: each must fail with exactly the text
// of the matching .err file, every problem as "file:line: field: reason", and return no
// tables.
func TestParseBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad schema files: %v", err)
	}
	for _, file := range files {
		f, err := schema.ParseFile(file)
		if err == nil {
			t.Errorf("%s parses", file)
			continue
		}
		if f != nil {
			t.Errorf("%s: tables returned with the error", file)
		}
		var list schema.ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Errorf("%s: error %T is not a non-empty ErrorList", file, err)
			continue
		}
		for _, e := range list {
			if e.File != file || e.Line <= 0 || !errLine.MatchString(e.Error()) {
				t.Errorf("%s: %q does not name the file and a line", file, e.Error())
			}
		}
		checkGolden(t, strings.TrimSuffix(file, ".yaml")+".err", err.Error()+"\n")
	}
}

// TestParseGood parses every testdata/good/*.yaml and compares the tables' Canonical()
// forms with the matching .canon file. Validating a parsed table again changes nothing.
func TestParseGood(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good schema files: %v", err)
	}
	for _, file := range files {
		f, err := schema.ParseFile(file)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if f.Path != file || len(f.Tables) == 0 {
			t.Errorf("%s: path %q, %d tables", file, f.Path, len(f.Tables))
		}
		var b strings.Builder
		for _, tab := range f.Tables {
			canon := tab.Canonical()
			if err := tab.Validate(); err != nil {
				t.Errorf("%s: table %s: validating again: %v", file, tab.Name, err)
			}
			if again := tab.Canonical(); again != canon {
				t.Errorf("%s: table %s: Canonical changed on validating again:\n%s\n%s", file, tab.Name, canon, again)
			}
			if got, ok := f.Table(tab.Name); !ok || got != tab {
				t.Errorf("%s: File.Table(%q) does not find it", file, tab.Name)
			}
			if tab.File != file || tab.Line <= 0 {
				t.Errorf("%s: table %s declared at %s:%d", file, tab.Name, tab.File, tab.Line)
			}
			b.WriteString(canon)
		}
		checkGolden(t, strings.TrimSuffix(file, ".yaml")+".canon", b.String())
	}
	if _, ok := (&schema.File{}).Table("nope"); ok {
		t.Error("File.Table found a missing table")
	}
}

// TestParseDefaults checks what a file may leave out.
func TestParseDefaults(t *testing.T) {
	f, err := schema.ParseFile("testdata/good/defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tab := f.Tables[0]
	if tab.VnodeCount != schema.DefaultVnodeCount {
		t.Errorf("vnodes %d, want the default %d", tab.VnodeCount, schema.DefaultVnodeCount)
	}
	if len(tab.DistKey) != 1 || tab.DistKey[0] != 0 {
		t.Errorf("distribution key %v, want the pk", tab.DistKey)
	}
	if k := tab.PK[0]; !k.Desc || !k.NullsFirst {
		t.Errorf("pk \"k desc\": %+v, want DESC NULLS FIRST (PostgreSQL's default for DESC)", k)
	}
	if tab.Columns[1].Nullable || tab.Columns[1].Type.Kind != schema.Float64 {
		t.Errorf("column v: %+v", tab.Columns[1])
	}
}

func TestParseGoNames(t *testing.T) {
	f, err := schema.ParseFile("testdata/good/names.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tab := f.Tables[0]
	want := []string{"OpCol", "Type", "ID", "URL", "RowCol", "UserID", "Private", "Func"}
	for i, c := range tab.Columns {
		if c.GoName != want[i] {
			t.Errorf("column %s: Go name %s, want %s", c.Name, c.GoName, want[i])
		}
	}
	if tab.GoName != "OpLog" {
		t.Errorf("table Go name %s", tab.GoName)
	}
}

// TestFingerprints pins the fingerprint of every table of the good files: a
// fingerprint names generated kernels, so it never changes for a given shape.
func TestFingerprints(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	var b strings.Builder
	for _, file := range files {
		f, err := schema.ParseFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, tab := range f.Tables {
			b.WriteString(filepath.Base(file) + " " + tab.Name + " " + tab.Fingerprint() + "\n")
		}
	}
	checkGolden(t, "testdata/fingerprints.txt", b.String())
}
