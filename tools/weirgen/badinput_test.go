package main

// Bad input (docs/testing.md, layer 5), row "malformed schema file": weirgen reports every
// problem as "file:line: field: reason" and generates and writes nothing, not even
// for the tables of the file that are fine, and removes no file it generated before.
// Parsing itself is covered by schema.TestParseBad (schema/parse_test.go, one golden
// file per sub-case) and schema.FuzzParse; the other rows of the table are mapped in
// engine/badinput_test.go.

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// twoTables is a good schema file of two tables: kv on lines 2-6, other on lines 7-11.
const twoTables = `tables:
  - name: kv
    columns:
      - {name: k, type: int64}
      - {name: v, type: varchar, nullable: true}
    primary_key: [k]
  - name: other
    columns:
      - {name: a, type: int64}
      - {name: b, type: int64}
    primary_key: [a]
`

// dirState is every file under dir: its mode and contents.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data := ""
		if !d.IsDir() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			data = string(b)
		}
		out[path] = info.Mode().String() + " " + info.ModTime().String() + "\n" + data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBadSchemaFileWritesNothing(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(twoTables, old) {
			t.Fatalf("%q is not in the schema", old)
		}
		return strings.Replace(twoTables, old, new, 1)
	}
	otherPK := "    primary_key: [a]\n"
	for _, c := range []struct {
		name   string
		schema string
		want   []string // each line of stderr: after "path:"
	}{
		{"syntax", replace("primary_key: [k]", "primary_key: [k"), []string{"7: YAML syntax: "}},
		{"unknown type", replace("type: varchar", "type: varchr"), []string{`5: kv.columns.v.type: unknown type "varchr"`}},
		{"duplicate column", replace("{name: b, type: int64}", "{name: a, type: int32}"), []string{`10: other.columns.a: duplicate column "a"`}},
		{"no pk", replace(otherPK, ""), []string{"7: other.primary_key: missing"}},
		{"distribution key outside the pk", replace(otherPK, otherPK+"    distribution_key: [b]\n"), []string{`12: other.distribution_key[0]: column "b" is not in the primary key`}},
		{"vnode count 0", replace(otherPK, otherPK+"    vnodes: 0\n"), []string{"12: other.vnodes: vnode count 0 out of range 1..32768"}},
		{"vnode count above 32768", replace(otherPK, otherPK+"    vnodes: 32769\n"), []string{"12: other.vnodes: vnode count 32769 out of range 1..32768"}},
		{"generated identifiers collide", replace("name: other", "name: kv_kernels"), []string{"7: kv_kernels.name: generated Go name KvKernels (the row struct) collides with table kv's KvKernels (the kernels function)"}},
		{"a column constant collides", replace("name: other", "name: kv_col_k"), []string{"7: kv_col_k.name: generated Go name KvColK (the row struct) collides with table kv's KvColK (the index constant of column k)"}},
		{"generated file names collide", strings.Replace(replace("name: kv", "name: abc"), "name: other", "name: abC", 1), []string{"7: abC.name: generated file abc.gen.go is also table abc's"}},
		{"two faults", strings.Replace(replace("type: varchar", "type: varchr"), otherPK, "", 1), []string{`5: kv.columns.v.type: unknown type "varchr"`, "7: other.primary_key: missing"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "s.yaml")
			out := filepath.Join(dir, "out")
			// Generated before from the good file: kv.gen.go and other.gen.go.
			if err := os.WriteFile(path, []byte(twoTables), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"-schema", path, "-pkg", "p", "-out", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("good schema: exit %d: %s", code, stderr.String())
			}
			for _, f := range []string{"kv.gen.go", "other.gen.go"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Fatalf("good schema: %v", err)
				}
			}
			before := dirState(t, out)

			if err := os.WriteFile(path, []byte(c.schema), 0o644); err != nil {
				t.Fatal(err)
			}
			stdout.Reset()
			stderr.Reset()
			code := run([]string{"-schema", path, "-pkg", "p", "-out", out, "-v"}, &stdout, &stderr)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != len(c.want) {
				t.Errorf("stderr has %d lines, want %d:\n%s", len(lines), len(c.want), stderr.String())
			}
			for i, w := range c.want {
				if i < len(lines) && !strings.HasPrefix(lines[i], path+":"+w) {
					t.Errorf("stderr line %d %q, want it to start with %q", i+1, lines[i], path+":"+w)
				}
			}
			if got := dirState(t, out); len(got) != len(before) {
				t.Errorf("the output directory changed: %d entries, had %d", len(got), len(before))
			} else {
				for p, st := range before {
					if got[p] != st {
						t.Errorf("%s changed", p)
					}
				}
			}

			// Into a directory that does not exist: it is not created.
			fresh := filepath.Join(dir, "fresh")
			if code := run([]string{"-schema", path, "-pkg", "p", "-out", fresh}, &stdout, &stderr); code != 1 {
				t.Errorf("into a new directory: exit %d, want 1", code)
			}
			if _, err := os.Stat(fresh); !os.IsNotExist(err) {
				t.Errorf("the output directory was created: %v", err)
			}
		})
	}
}
