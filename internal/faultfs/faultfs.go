// Package faultfs wraps a pebble file system so that an errorfs injector sees every
// operation, for fault injection in tests and in the simulation (tools/sim).
package faultfs

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Wrap wraps fs with errorfs, calling inj before every operation. Unlike a bare
// errorfs.Wrap it also wraps the files that ReuseForWrite returns (pebble recycles WAL
// files that way, and errorfs hands them out unwrapped), naming them by their new
// name: without it, faults meant for the WAL miss every recycled log. The FS is a
// pointer, comparable whatever the injector is (pebble compares file systems when it
// ingests an sstable).
func Wrap(fs vfs.FS, inj errorfs.Injector) vfs.FS {
	return &reuseFS{FS: errorfs.Wrap(fs, inj), inj: inj}
}

type reuseFS struct {
	*errorfs.FS
	inj errorfs.Injector
}

// ReuseForWrite implements vfs.FS.
func (r *reuseFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := r.FS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, err
	}
	return errorfs.WrapFile(f, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Path == "" {
			op.Path = newname
		}
		return r.inj.MaybeError(op)
	})), nil
}
