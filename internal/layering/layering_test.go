// Package layering holds the test that keeps Weir's imports going down the table of
// docs/design.md §1.
package layering

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/seed04fbb902/weir"

// allowed maps a package (relative to the module; a prefix ending in "/" covers a
// subtree) to the Weir packages its non-test code may import; the first entry that
// matches a package is its rule, so bench/nexmark/views (the views, which build on the
// engine) comes before the rest of bench/nexmark/, and engine/cluster/ (cluster mode,
// which builds on the engine) before engine. gen imports vec: vec.NewLayout is the
// value format's single source of the slot offsets that the generator bakes into code.
var allowed = []struct {
	pkg     string
	imports []string
}{
	{"schema", nil},
	{"vec", []string{"schema"}},
	{"vec/vectest", []string{"schema", "vec"}},
	{"gen", []string{"schema", "vec"}},
	{"vnode", []string{"schema", "vec"}},
	{"storage/storetest", []string{"schema", "vec", "vnode", "storage"}},
	{"storage", []string{"schema", "vec", "vnode"}},
	{"executors", []string{"schema", "vec", "vnode", "storage"}},
	{"engine/cluster/", []string{"schema", "vec", "vnode", "storage", "executors", "engine", "engine/cluster/"}},
	{"engine", []string{"schema", "vec", "vnode", "storage", "executors"}},
	{"bench/nexmark/views", []string{"schema", "vec", "vnode", "storage", "executors", "engine", "bench/nexmark/"}},
	{"bench/nexmark/", []string{"schema", "vec", "bench/nexmark/"}},
	{"internal/testschemas", []string{"schema", "vec"}},
	{"internal/faultfs", nil},
	{"internal/invariants", nil},
	{"internal/pgtest", nil},
	{"internal/s3test", nil},
	{"internal/faultblob", nil},
	{"internal/layering", nil},
	{"tools/", []string{"*"}},
	{"examples", []string{"*"}},
	{"bench", []string{"*"}},
}

// fixtures may be imported by any package's tests: they sit on vec and schema
// (storage/storetest on storage too).
var fixtures = []string{"vec/vectest", "storage/storetest", "internal/testschemas", "internal/faultfs", "internal/invariants", "internal/pgtest", "internal/s3test", "internal/faultblob", "bench/nexmark/tables"}

func rule(rel string) ([]string, bool) {
	for _, r := range allowed {
		if rel == r.pkg || (strings.HasSuffix(r.pkg, "/") && strings.HasPrefix(rel, r.pkg)) {
			return r.imports, true
		}
	}
	for _, r := range allowed {
		if strings.HasPrefix(rel, r.pkg+"/") {
			return r.imports, true
		}
	}
	return nil, false
}

func permits(list []string, imp string) bool {
	for _, a := range list {
		if a == "*" || a == imp || (strings.HasSuffix(a, "/") && strings.HasPrefix(imp, a)) {
			return true
		}
	}
	return false
}

func TestImportsGoDown(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		list, ok := rule(rel)
		if !ok {
			t.Errorf("package %s has no layering rule: add it to docs/design.md §1 and this test", rel)
			return nil
		}
		checked++
		check := func(imports []string, extra []string) {
			for _, imp := range imports {
				if !strings.HasPrefix(imp, module+"/") {
					continue
				}
				target := strings.TrimPrefix(imp, module+"/")
				if permits(list, target) || slices.Contains(extra, target) || target == rel {
					continue
				}
				t.Errorf("%s imports %s; it may import only %v of Weir", rel, target, list)
			}
		}
		check(pkg.Imports, nil)
		check(append(pkg.TestImports, pkg.XTestImports...), fixtures)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 8 {
		t.Fatalf("checked only %d packages: the walk is broken", checked)
	}
}
