package storage

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrInUse is the error (errors.Is) of Open on a directory that another store, in
// this process or another, has open.
var ErrInUse = errors.New("in use by another engine")

// checkStoreDir returns nil when dir is missing, empty or holds a store (see Open),
// and an error naming dir otherwise.
func checkStoreDir(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage: open %s: %w", dir, err)
	}
	if len(names) == 0 || slices.ContainsFunc(names, isStoreFile) {
		return nil
	}
	slices.Sort(names)
	some := names
	if len(some) > 3 {
		some = append(some[:3:3], "...")
	}
	return fmt.Errorf("storage: directory %s is not empty and holds no engine (it has %s); open an engine in an empty or new directory",
		dir, strings.Join(some, ", "))
}

// isStoreFile reports whether name (an entry of a store's directory) is one that a
// store creates: a file pebble names, or the ingest directory.
func isStoreFile(name string) bool {
	num := func(s string) bool {
		if s == "" {
			return false
		}
		for _, c := range []byte(s) {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	switch {
	case name == "LOCK", name == "CURRENT", name == IngestDirName, name == NodeStoresDirName, strings.HasPrefix(name, "marker."):
		return true
	case strings.HasPrefix(name, "MANIFEST-"):
		return num(name[len("MANIFEST-"):])
	case strings.HasPrefix(name, "OPTIONS-"):
		return num(name[len("OPTIONS-"):])
	case strings.HasSuffix(name, ".dbtmp"):
		s := strings.TrimSuffix(name, ".dbtmp")
		return num(strings.TrimPrefix(s, "temporary.")) || num(strings.TrimPrefix(s, "CURRENT."))
	}
	stem, ext, ok := strings.Cut(name, ".")
	if !ok {
		return false
	}
	switch ext {
	case "sst", "blob":
		return num(stem)
	case "log": // n.log, or n-i.log (a WAL's later log files)
		n, i, two := strings.Cut(stem, "-")
		return num(n) && (!two || num(i))
	}
	return false
}

// lockStoreDir creates dir when missing and takes pebble's lock on it. Failing to get
// the lock, whether this process or another holds it, is one error naming dir that
// wraps the lock's (pebble's Lock of the OS file system reports "lock held by current
// process" within one, the fcntl lock's EAGAIN or EACCES across processes; its
// in-memory file system, EAGAIN).
func lockStoreDir(fs vfs.FS, dir string) (*pebble.Lock, error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	lock, err := pebble.LockDirectory(dir, fs)
	if err == nil {
		return lock, nil
	}
	// A failure to create the LOCK file (a *PathError, such as EACCES for a
	// directory the process may not write) is not a conflict.
	var pe *iofs.PathError
	if !errors.As(err, &pe) && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")) {
		return nil, fmt.Errorf("storage: engine directory %s is %w (locked: %w)", dir, ErrInUse, err)
	}
	return nil, fmt.Errorf("storage: open %s: lock: %w", dir, err)
}
