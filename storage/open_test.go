package storage_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/seed04fbb902/weir/storage"
)

// openFS is a file system for the Open tests, with the path of a store directory in
// it: the OS's (under t.TempDir) or pebble's in-memory one.
type openFS struct {
	name string
	new  func(t *testing.T) (vfs.FS, string)
}

var openFSes = []openFS{
	{"os", func(t *testing.T) (vfs.FS, string) { return vfs.Default, filepath.Join(t.TempDir(), "db") }},
	{"mem", func(*testing.T) (vfs.FS, string) { return vfs.NewMem(), "db" }},
}

func writeFile(t *testing.T, fs vfs.FS, path string) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("the user's\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func listDir(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// storeFiles creates a store in dir, commits a checkpoint, closes it and returns
// the entries it left in dir.
func storeFiles(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	s, err := storage.Open(dir, testOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	s.SetCatalog("x", []byte("y"))
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return listDir(t, fs, dir)
}

// TestOpenForeignDirectory: a missing or empty directory gets a new store and a
// directory holding a store opens it, but a non-empty directory that holds none is
// refused with an error naming it, and nothing is written to it.
func TestOpenForeignDirectory(t *testing.T) {
	for _, ofs := range openFSes {
		for _, c := range []struct {
			name    string
			prepare func(t *testing.T, fs vfs.FS, dir string)
			refused bool
			epoch   uint64 // committed epoch of the opened store
		}{
			{"missing directory", func(*testing.T, vfs.FS, string) {}, false, 0},
			{"empty directory", func(t *testing.T, fs vfs.FS, dir string) {
				if err := fs.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}, false, 0},
			{"directory of the user's files", func(t *testing.T, fs vfs.FS, dir string) {
				if err := fs.MkdirAll(fs.PathJoin(dir, "photos"), 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, fs, fs.PathJoin(dir, "notes.txt"))
				writeFile(t, fs, fs.PathJoin(dir, "server.log")) // not a WAL's name
			}, true, 0},
			{"a store", func(t *testing.T, fs vfs.FS, dir string) { storeFiles(t, fs, dir) }, false, ep(1)},
			{"a store and the user's files", func(t *testing.T, fs vfs.FS, dir string) {
				storeFiles(t, fs, dir)
				writeFile(t, fs, fs.PathJoin(dir, "notes.txt"))
			}, false, ep(1)},
		} {
			t.Run(ofs.name+"/"+c.name, func(t *testing.T) {
				fs, dir := ofs.new(t)
				c.prepare(t, fs, dir)
				var before []string
				if c.refused {
					before = listDir(t, fs, dir)
				}
				s, err := storage.Open(dir, testOptions(fs))
				if c.refused {
					if err == nil {
						s.Close()
						t.Fatalf("opened a store among %v", before)
					}
					for _, w := range []string{dir, "is not empty and holds no engine", "notes.txt"} {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error %q lacks %q", err, w)
						}
					}
					if after := listDir(t, fs, dir); !slices.Equal(after, before) {
						t.Errorf("the refused open changed the directory: %v, was %v", after, before)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got := s.CommittedEpoch(); got != c.epoch {
					t.Fatalf("committed epoch %d, want %d", got, c.epoch)
				}
			})
		}
	}
}

// TestOpenPartialStore: a directory holding any one of a store's files, next to the
// user's, counts as a store: Open does not refuse it as foreign. It opens when that
// file is one that a crash image can hold alone (the lock, the options, a manifest
// not yet named by its marker, the ingest directory); pebble itself refuses a WAL or
// a marker without the manifest, which no crash leaves behind (pebble syncs the
// manifest before it names it, and has a manifest before it writes a WAL).
func TestOpenPartialStore(t *testing.T) {
	for _, ofs := range openFSes {
		fs, dir := ofs.new(t)
		names := storeFiles(t, fs, dir)
		for _, want := range []string{"LOCK", "MANIFEST-", "OPTIONS-", "marker.", ".log", storage.IngestDirName} {
			if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, want) }) {
				t.Fatalf("%s: a closed store's files %v lack %q", ofs.name, names, want)
			}
		}
		for _, n := range names {
			t.Run(ofs.name+"/"+n, func(t *testing.T) {
				d := dir + "-" + n
				if err := fs.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if n == storage.IngestDirName {
					if err := fs.MkdirAll(fs.PathJoin(d, n), 0o755); err != nil {
						t.Fatal(err)
					}
				} else if err := vfs.CopyAcrossFS(fs, fs.PathJoin(dir, n), fs, fs.PathJoin(d, n)); err != nil {
					t.Fatal(err)
				}
				writeFile(t, fs, fs.PathJoin(d, "notes.txt"))
				s, err := storage.Open(d, testOptions(fs))
				if err == nil {
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					return
				}
				if strings.Contains(err.Error(), "holds no engine") {
					t.Fatalf("a directory holding %s refused as foreign: %v", n, err)
				}
				if !strings.HasPrefix(n, "marker.") && !strings.HasSuffix(n, ".log") {
					t.Fatalf("open of a directory holding %s: %v", n, err)
				}
			})
		}
	}
}

// TestOpenCrashDuringCreate: a crash at any write of the first open of a store leaves
// a directory that opens.
func TestOpenCrashDuringCreate(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var clones []*vfs.MemFS
	var ops []string
	hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{}))
			ops = append(ops, opName(op.Kind)+" "+op.Path)
		}
		return nil
	})
	s, err := storage.Open("db", testOptions(faultFS(mem, hook)))
	if err != nil {
		t.Fatal(err)
	}
	s.SetCatalog("x", []byte("y"))
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(clones) < 5 {
		t.Fatalf("%d crash points", len(clones))
	}
	for i, fs := range clones {
		s, err := storage.Open("db", testOptions(fs))
		if err != nil {
			t.Fatalf("crash before %s: open: %v", ops[i], err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// checkInUse checks the error of an Open of a directory that another store has open.
func checkInUse(t *testing.T, err error, dir string) {
	t.Helper()
	if err == nil {
		t.Fatal("opened a directory that another store has open")
	}
	want := "engine directory " + dir + " is in use by another engine (locked: "
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want one containing %q", err, want)
	}
}

// TestOpenInUse: a second Open of a directory in this process fails with one message
// naming it, the first store carries on, and once it is closed the directory opens.
func TestOpenInUse(t *testing.T) {
	for _, ofs := range openFSes {
		t.Run(ofs.name, func(t *testing.T) {
			fs, dir := ofs.new(t)
			s, err := storage.Open(dir, testOptions(fs))
			if err != nil {
				t.Fatal(err)
			}
			_, err = storage.Open(dir, testOptions(fs))
			checkInUse(t, err, dir)
			if ofs.name == "mem" && !errors.Is(err, syscall.EAGAIN) {
				t.Errorf("error %v does not wrap the lock's EAGAIN", err)
			}
			s.SetCatalog("x", []byte("y"))
			if _, err := s.Checkpoint(ep(1)); err != nil {
				t.Fatalf("the first store after the refused open: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = storage.Open(dir, testOptions(fs))
			if err != nil {
				t.Fatalf("reopen after close: %v", err)
			}
			defer s.Close()
			if got := s.CommittedEpoch(); got != ep(1) {
				t.Fatalf("committed epoch %d, want %d", got, ep(1))
			}
		})
	}
}

const lockChildEnv = "WEIR_STORAGE_TEST_LOCK_CHILD"

// TestOpenInUseByAnotherProcess: a child process (this test binary) holds a store
// open; the parent's Open fails with the same message as within one process, wrapping
// the OS's lock error, and opens once the child is gone.
func TestOpenInUseByAnotherProcess(t *testing.T) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		lockChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := filepath.Join(t.TempDir(), "db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenInUseByAnotherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the child holds the store until its stdin closes
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := false
	defer func() {
		if !exited {
			stdin.Close()
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
			cmd.Wait()
		}
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if line != "open\n" {
			t.Fatalf("child: %q, want it to report the store open", line)
		}
	case <-time.After(time.Minute):
		t.Fatal("the child did not open the store within a minute")
	}
	_, err = storage.Open(dir, testOptions(vfs.Default))
	checkInUse(t, err, dir)
	if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
		t.Errorf("error %v wraps neither EAGAIN nor EACCES", err)
	}
	// Kill the child (by its pid): the OS drops its lock.
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	cmd.Wait()
	exited = true
	s, err := storage.Open(dir, testOptions(vfs.Default))
	if err != nil {
		t.Fatalf("open after the child died: %v", err)
	}
	if got := s.CommittedEpoch(); got != ep(1) {
		t.Errorf("committed epoch %d, want the child's %d", got, ep(1))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// lockChild opens a store in dir, commits a checkpoint, reports "open" and holds the
// store until its stdin closes (or it is killed).
func lockChild(dir string) {
	s, err := storage.Open(dir, testOptions(vfs.Default))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	s.SetCatalog("x", []byte("y"))
	if _, err := s.Checkpoint(ep(1)); err != nil {
		fmt.Println("checkpoint:", err)
		os.Exit(3)
	}
	fmt.Println("open")
	bufio.NewReader(os.Stdin).ReadString('\n')
	s.Close()
	os.Exit(0)
}
