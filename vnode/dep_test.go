package vnode

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestImports asserts the layering of docs/design.md: vnode imports only vec and schema of
// Weir (its tests likewise, and the build-tag switches of internal/invariants), and
// nothing above them.
func TestImports(t *testing.T) {
	const module = "github.com/seed04fbb902/weir/"
	allowed := []string{module + "schema", module + "vec"}
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pkg.Imports, module+"vec") {
		t.Fatalf("go/build found no import of vec in %v: the check would be vacuous", pkg.Imports)
	}
	testAllowed := append(slices.Clone(allowed), module+"internal/invariants")
	for _, imports := range [][]string{pkg.Imports, pkg.TestImports, pkg.XTestImports} {
		for _, imp := range imports {
			if strings.HasPrefix(imp, module) && !slices.Contains(testAllowed, imp) {
				t.Errorf("vnode imports %s; it may import only %v of Weir", imp, allowed)
			}
		}
	}
	// Non-test code: only the standard library, roaring and Weir's allowed packages.
	for _, imp := range pkg.Imports {
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") &&
			!strings.HasPrefix(imp, "github.com/RoaringBitmap/roaring/v2") && !slices.Contains(allowed, imp) {
			t.Errorf("vnode imports %s: only the standard library, roaring, vec and schema are allowed", imp)
		}
	}
}
