package gen_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/gen"
	"github.com/seed04fbb902/weir/schema"
)

// TestLocalsShadowNothing generates the tables whose generated functions' locals are
// the likeliest to shadow a package-level identifier that the functions use, or one
// another: tables named after the words locals are made of, each with columns named
// after the suffixes of the table's own unexported identifiers (a table "slot" with a
// column "layout" must not declare a local slotLayout beside its slotLayout), after
// the fixed locals, and two whose Go names lower to one name (IDX and Idx). The
// generated code must compile.
func TestLocalsShadowNothing(t *testing.T) {
	var cols []string
	for _, id := range schema.Idents() {
		if !id.Exported() {
			cols = append(cols, strings.TrimPrefix(named(t, "x").Ident(id), "x"))
		}
	}
	cols = append(cols, "id_x", "idx", "var_start", "want", "start", "end", "step", "slot", "total")
	var src strings.Builder
	src.WriteString("tables:\n")
	tables := []string{"slot", "total", "end", "var", "want", "start"}
	for _, name := range tables {
		fmt.Fprintf(&src, "  - name: %s\n    columns:\n      - {name: k, type: int64}\n", name)
		for i, c := range cols {
			typ := "varchar"
			if i%3 == 2 {
				typ = "int32"
			}
			fmt.Fprintf(&src, "      - {name: %q, type: %s, nullable: %v}\n", c, typ, i%2 == 0)
		}
		src.WriteString("    primary_key: [k]\n")
	}
	f, err := schema.Parse("locals.yaml", []byte(src.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, src.String())
	}
	outs, err := gen.Generate(f, "p")
	if err != nil {
		t.Fatal(err)
	}
	b := &batch{pkg: "p", names: map[string]bool{}, files: map[string]string{}, outs: outs}
	for i, tab := range f.Tables {
		b.files[outs[i].Name] = "table " + tab.Name
		b.kernels = append(b.kernels, tab.Ident(schema.IdentKernelsFunc))
		b.users = append(b.users, "table "+tab.Name)
	}
	compileBatches(t, []*batch{b})
}
