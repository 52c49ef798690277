package gen

import (
	"fmt"
	"go/build"
	"io"
	"strings"

	"github.com/seed04fbb902/weir/schema"
)

// FileName is the name of a table's generated file: the table's name in lower case
// with ".gen.go". Go's build rules would skip or restrict some of those names, so a
// leading underscore is dropped (the go command ignores files whose names start with
// one) and a name whose last part reads as a build constraint ("app_android",
// "x_amd64": compiled only for that system or architecture) gets "_table" appended.
func FileName(t *schema.Table) string {
	base := strings.TrimLeft(strings.ToLower(t.Name), "_")
	if !buildsEverywhere(base + ".gen.go") {
		base += "_table"
	}
	return base + ".gen.go"
}

// buildsEverywhere reports whether the go command compiles a Go file of that name
// (holding no build constraint) for every system and architecture: the name is not
// ignored and carries no GOOS or GOARCH suffix. go/build holds the lists of both.
func buildsEverywhere(name string) bool {
	ctxt := build.Default
	ctxt.GOOS, ctxt.GOARCH = "weirgen", "weirgen" // matches no constraint
	ctxt.OpenFile = func(string) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("package p\n")), nil
	}
	ok, err := ctxt.MatchFile(".", name)
	return err == nil && ok
}

// checkFileNames refuses two tables of f with one generated file name (file names are
// in lower case, so "abC" and "abc" would share one), each at the later table's line.
func checkFileNames(f *schema.File) error {
	var errs schema.ErrorList
	owner := map[string]string{}
	for _, t := range f.Tables {
		name := FileName(t)
		if other, ok := owner[name]; ok {
			errs = append(errs, &schema.Error{
				File: f.Path, Line: t.Line, Field: t.Name + ".name",
				Reason: fmt.Sprintf("generated file %s is also table %s's (file names are lower case); rename one of them", name, other),
			})
			continue
		}
		if !buildsEverywhere(name) {
			return fmt.Errorf("gen: table %s: the go command would not build file %s everywhere", t.Name, name)
		}
		owner[name] = t.Name
	}
	return errs.Err()
}
