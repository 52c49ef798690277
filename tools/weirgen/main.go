// Command weirgen generates typed Weir code for the tables of a schema file: row
// structs, chunk builders and views, pk and value codecs, and the vnode and merge
// kernels, one <table>.gen.go file per table. Make it a tool of the module once
// (go get -tool github.com/seed04fbb902/weir/tools/weirgen) and run it from a
// generate directive:
//
//	//go:generate go tool weirgen -schema tables.yaml -pkg tables -out .
//
// Flags: -schema FILE and -pkg NAME (both required), -out DIR (default "."), -v (print
// the files written). A usage error exits 2.
//
// On a schema error it prints "file:line: field: reason" for each problem, writes
// nothing and exits 1. Besides malformed input, that refuses schemas whose generated
// Go would not compile: two columns of a table with one Go name ("date_time" and
// "DateTime"), and tables whose generated identifiers or file names collide (a table
// "a" and a table "a_kernels" would both declare AKernels; see schema.Ident for every
// identifier generated). A column whose Go name is a method of the generated view or
// builder gets the suffix Col instead ("pk" becomes PKCol; see
// schema.ReservedColumnNames). Files it generated before for tables that the schema no
// longer declares are removed.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed04fbb902/weir/gen"
	"github.com/seed04fbb902/weir/schema"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weirgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	schemaPath := fs.String("schema", "", "schema file (YAML) to generate from")
	pkg := fs.String("pkg", "", "Go package name of the generated files")
	out := fs.String("out", ".", "directory to write the generated files into")
	verbose := fs.Bool("v", false, "print the files written")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *schemaPath == "" || *pkg == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: weirgen -schema FILE -pkg NAME [-out DIR]")
		return 2
	}
	f, err := schema.ParseFile(*schemaPath)
	if err != nil {
		report(stderr, err)
		return 1
	}
	files, err := gen.Generate(f, *pkg)
	if err != nil {
		report(stderr, err)
		return 1
	}
	if err := write(*out, filepath.Base(*schemaPath), files); err != nil {
		fmt.Fprintln(stderr, "weirgen:", err)
		return 1
	}
	if *verbose {
		for _, o := range files {
			fmt.Fprintln(stdout, filepath.Join(*out, o.Name))
		}
	}
	return 0
}

// report prints err, each problem of a schema.ErrorList on a line of its own.
func report(stderr io.Writer, err error) {
	var list schema.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(stderr, e)
		}
		return
	}
	fmt.Fprintln(stderr, err)
}

// write puts every file in place (each through a temporary file and a rename, and only
// when its contents changed), then removes generated files of the same schema file
// whose tables are gone.
func write(dir, source string, files []gen.Output) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, o := range files {
		keep[o.Name] = true
		path := filepath.Join(dir, o.Name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, o.Data) {
			continue
		}
		tmp, err := os.CreateTemp(dir, ".weirgen-*")
		if err != nil {
			return err
		}
		if _, err := tmp.Write(o.Data); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return err
		}
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		if err := os.Chmod(tmp.Name(), 0o644); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	stale, _ := filepath.Glob(filepath.Join(dir, "*.gen.go"))
	marker := "// Source: " + source + ", table "
	for _, path := range stale {
		if keep[filepath.Base(path)] {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if strings.HasPrefix(string(data), "// "+gen.Header) && strings.Contains(string(data), marker) {
			if err := os.Remove(path); err != nil {
				return err
			}
		}
	}
	return nil
}
