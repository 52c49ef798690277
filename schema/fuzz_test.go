package schema_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/schema"
)

// schemaFiles returns the contents of every schema file under testdata/good and bad.
func schemaFiles(t testing.TB) map[string][]byte {
	files, err := filepath.Glob("testdata/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = data
	}
	return out
}

// FuzzParse parses arbitrary bytes as a schema file. Parse never panics; it returns
// either tables or a non-empty ErrorList naming the file, never both; and every table it
// returns validates again without changing its Canonical form or fingerprint.
func FuzzParse(f *testing.F) {
	for _, data := range schemaFiles(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := schema.Parse("fuzz.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatal("Parse returned tables and an error")
			}
			var list schema.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error %T %v is not a non-empty ErrorList", err, err)
			}
			for _, e := range list {
				if e.File != "fuzz.yaml" || !strings.HasPrefix(e.Error(), "fuzz.yaml:") {
					t.Fatalf("error %q does not name the file", e.Error())
				}
			}
			return
		}
		if file == nil || len(file.Tables) == 0 {
			t.Fatal("Parse returned no tables and no error")
		}
		names := map[string]bool{}
		for _, tab := range file.Tables {
			if names[tab.Name] {
				t.Fatalf("two tables named %q", tab.Name)
			}
			names[tab.Name] = true
			canon, fp := tab.Canonical(), tab.Fingerprint()
			if err := tab.Validate(); err != nil {
				t.Fatalf("table %s parses but does not validate: %v", tab.Name, err)
			}
			if tab.Canonical() != canon || tab.Fingerprint() != fp {
				t.Fatalf("table %s: validating again changed it:\n%s\n%s", tab.Name, canon, tab.Canonical())
			}
			if tab.VnodeCount < 1 || tab.VnodeCount > schema.MaxVnodeCount || len(tab.PK) == 0 || len(tab.DistKey) == 0 {
				t.Fatalf("table %s: bad shape\n%s", tab.Name, canon)
			}
			// Every type prints as text that parses back to it.
			for _, c := range tab.Columns {
				if typ, err := schema.ParseType(c.Type.String()); err != nil || typ != c.Type {
					t.Fatalf("column %s: type %s does not parse back: %v", c.Name, c.Type, err)
				}
			}
		}
	})
}

// TestFuzzParseCorpus keeps testdata/fuzz/FuzzParse in step with the schema files under
// testdata: -rewrite writes one corpus file per schema file; otherwise every schema
// file must have its corpus file.
func TestFuzzParseCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	for path, data := range schemaFiles(t) {
		name := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(path, "testdata/"), ".yaml"), "/", "-")
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		file := filepath.Join(dir, name)
		if *rewrite {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("%s is missing or stale for %s (run go test ./schema -run TestFuzzParseCorpus -rewrite): %v", file, path, err)
		}
	}
}
