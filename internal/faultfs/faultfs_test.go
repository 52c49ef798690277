package faultfs

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A write to a file handed out by ReuseForWrite reaches the injector, under the
// file's new name (a bare errorfs.Wrap lets it through).
func TestReusedFileIsWrapped(t *testing.T) {
	mem := vfs.NewMem()
	f, err := mem.Create("000001.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	boom := errors.New("boom")
	var paths []string
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileWrite {
			paths = append(paths, op.Path)
			return boom
		}
		return nil
	})
	for _, c := range []struct {
		name string
		fs   vfs.FS
		want error
	}{
		{"bare errorfs", errorfs.Wrap(mem, inj), nil},
		{"faultfs", Wrap(mem, inj), boom},
	} {
		paths = nil
		r, err := c.fs.ReuseForWrite("000001.log", "000002.log", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Write([]byte("x"))
		r.Close()
		if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Errorf("%s: write: %v, want %v", c.name, err, c.want)
		}
		if c.want != nil && (len(paths) != 1 || paths[0] != "000002.log") {
			t.Errorf("%s: injector saw %q, want the new name", c.name, paths)
		}
		if err := mem.Rename("000002.log", "000001.log"); err != nil {
			t.Fatal(err)
		}
	}
}
