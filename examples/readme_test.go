// Package examples holds Weir's runnable examples (orders: a schema of one's own and
// its generated code) and the test that keeps the Go in the documentation compiled.
package examples

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A region is the Go between a "// README:begin NAME" line and the next
// "// README:end" line of a Go file of the repository, dedented by the begin line's
// indentation: the text of one Go block of the documentation. The file compiles (an
// example test runs it), so the block does too.
type region struct {
	name, at, text string
}

func regions(t *testing.T, root string) []region {
	t.Helper()
	var out []region
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var cur *region
		var indent string
		var body []string
		for i, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(trimmed, "// README:begin "):
				if cur != nil {
					return fmt.Errorf("%s:%d: README:begin inside region %s", path, i+1, cur.name)
				}
				cur = &region{name: strings.TrimPrefix(trimmed, "// README:begin "), at: fmt.Sprintf("%s:%d", path, i+1)}
				indent = line[:len(line)-len(strings.TrimLeft(line, "\t "))]
				body = nil
			case trimmed == "// README:end":
				if cur == nil {
					return fmt.Errorf("%s:%d: README:end outside a region", path, i+1)
				}
				cur.text = strings.Join(body, "\n")
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				if line != "" && !strings.HasPrefix(line, indent) {
					return fmt.Errorf("%s:%d: region %s: a line indented less than its begin line", path, i+1, cur.name)
				}
				body = append(body, strings.TrimPrefix(line, indent))
			}
		}
		if cur != nil {
			return fmt.Errorf("%s: region %s has no README:end", path, cur.name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A block is one fenced ```go block of a Markdown file.
type block struct{ at, text string }

// goBlocks are the Go blocks of a Markdown file, but for those between the
// fresh-module markers (scripts/fresh-module.sh runs those).
func goBlocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	var body []string
	skip := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- fresh-module:begin"):
			skip = true
		case strings.HasPrefix(line, "<!-- fresh-module:end"):
			skip = false
		case cur == nil && strings.TrimSpace(line) == "```go":
			if !skip {
				cur = &block{at: fmt.Sprintf("%s:%d", path, n)}
				body = nil
			}
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.text = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: an unterminated Go block", cur.at)
	}
	return out
}

// TestDocsGoCompiles: every Go block of README.md and docs/*.md is, byte for byte,
// the text of one README region of a Go file that the tests compile and run, and
// every region is shown exactly once. The YAML block of README.md is
// examples/orders/orders.yaml.
func TestDocsGoCompiles(t *testing.T) {
	root := filepath.Join("..")
	regs := regions(t, root)
	if len(regs) < 3 {
		t.Fatalf("found %d README regions, want the engine, generate and generated ones at least", len(regs))
	}
	docs := []string{filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, more...)
	shown := map[string][]string{}
	for _, doc := range docs {
		for _, b := range goBlocks(t, doc) {
			i := slices.IndexFunc(regs, func(r region) bool { return r.text == b.text })
			if i < 0 {
				t.Errorf("%s: a Go block that is no README region of a compiled file (mark the code it shows with // README:begin NAME ... // README:end):\n%s", b.at, b.text)
				continue
			}
			shown[regs[i].name] = append(shown[regs[i].name], b.at)
		}
	}
	for _, r := range regs {
		if n := len(shown[r.name]); n != 1 {
			t.Errorf("region %s (%s) is shown %d times (%v), want once", r.name, r.at, n, shown[r.name])
		}
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	schemaFile, err := os.ReadFile(filepath.Join("orders", "orders.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, append(append([]byte("```yaml\n"), schemaFile...), "```"...)) {
		t.Errorf("README.md does not show examples/orders/orders.yaml as its YAML block")
	}
}
