// Package pgtest runs a private PostgreSQL server for tests: scripts/pg.sh starts it
// in a fresh temporary directory on a free loopback port, and Stop stops exactly that
// server (by its data directory) and removes the directory; a reaper stops it too when
// the process that started it ends without Stop (a panic, a kill). Tests that need
// one fail, not skip, without PostgreSQL: `make pg-install` installs it.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Server is a running private PostgreSQL server.
type Server struct {
	DSN    string // of its postgres database, as scripts/pg.sh printed it
	dir    string
	port   string
	script string
	dbs    atomic.Int64
	reaper *os.Process // stops the server if this process ends without Stop
}

// reaperScript, run by sh with the pid to watch, the script, the directory and the
// port, waits for that process to end, then stops the server and removes its
// directory: a test binary that panics or is killed does not leave its server
// running.
const reaperScript = `while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3" "$4" >/dev/null 2>&1; rm -rf "$3"`

// startReaper starts, in a session of its own (so that it outlives the process it
// watches), the reaper of s watching pid.
func (s *Server) startReaper(pid int) error {
	cmd := exec.Command("sh", "-c", reaperScript, "pgtest-reaper", strconv.Itoa(pid), s.script, s.dir, s.port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start the reaper of %s: %w", s.dir, err)
	}
	s.reaper = cmd.Process
	go cmd.Wait() // reaped by this process while it runs
	return nil
}

// Start starts a server in a new temporary directory named after prefix. The script
// is found from the working directory upwards (the module's root holds scripts/).
func Start(prefix string) (*Server, error) {
	script, err := findScript()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", prefix+"-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, script: script}
	for range 3 {
		if s.port, err = FreePort(); err != nil {
			break
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(script, "start", dir, s.port)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err = cmd.Run(); err == nil {
			lines := strings.Fields(stdout.String())
			if len(lines) == 0 {
				err = fmt.Errorf("%s start %s %s printed no DSN", script, dir, s.port)
				break
			}
			s.DSN = lines[len(lines)-1]
			if err := s.startReaper(os.Getpid()); err != nil {
				return nil, errors.Join(err, s.Stop())
			}
			return s, nil
		}
		err = fmt.Errorf("%s start %s %s: %v\n%s", script, dir, s.port, err, stderr.String())
		if !strings.Contains(stderr.String(), "did not start") {
			break // a port taken between choosing it and the bind is retried
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("a private PostgreSQL server (run `make pg-install` when its binaries are missing): %w", err)
}

// Stop stops the server and removes its directory, then its reaper: a process
// killed in the middle of Stop (a fuzzing worker at its deadline) leaves the rest to
// the reaper.
func (s *Server) Stop() error {
	out, err := exec.Command(s.script, "stop", s.dir, s.port).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s stop %s %s: %v\n%s", s.script, s.dir, s.port, err, out)
	}
	err = errors.Join(err, os.RemoveAll(s.dir))
	if s.reaper != nil {
		_ = s.reaper.Kill() // by its pid: the sh that waits; nothing else
	}
	return err
}

// NewDatabase creates an empty database on the server and returns its DSN.
func (s *Server) NewDatabase(t testing.TB, prefix string) string {
	t.Helper()
	dsn, err := CreateDatabase(context.Background(), s.DSN, fmt.Sprintf("%s_%d", prefix, s.dbs.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// CreateDatabase creates the empty database name on the server whose postgres
// database server names, and returns the new database's DSN.
func CreateDatabase(ctx context.Context, server, name string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("pgtest: parse the server's DSN: %w", err)
	}
	if err := exec1(ctx, server, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase drops the database name, which nothing may be connected to, from
// the server whose postgres database server names.
func DropDatabase(ctx context.Context, server, name string) error {
	if err := exec1(ctx, server, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: drop database %s: %w", name, err)
	}
	return nil
}

// exec1 runs one statement on its own connection to dsn.
func exec1(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(dsn), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// redact is dsn without its password.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "the server"
	}
	return u.Redacted()
}

// findScript returns the path of scripts/pg.sh in the nearest directory at or above
// the working directory that holds a go.mod.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", "pg.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("pgtest: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
