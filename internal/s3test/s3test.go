// Package s3test runs a private S3-protocol server for tests: versitygw (pinned in
// tools/versitygw; make versitygw builds it into .bin/), serving a fresh temporary
// directory through its posix backend on a free loopback port. Stop stops exactly
// that process (by its pid) and removes the directory.
//
// Tests use it when WEIR_VERSITYGW names the binary (make test-s3 sets it) and keep
// to file:// buckets otherwise: see BucketURL.
package s3test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BinaryEnv names the versitygw binary the tests start; unset, they use file://
// buckets.
const BinaryEnv = "WEIR_VERSITYGW"

// The root credentials of every server, given to the S3 clients of this process
// (and its children) through AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
const (
	AccessKey = "weirtest"
	SecretKey = "weirtest-secret"
)

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	bin      string
	addr     string
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	stderr   bytes.Buffer
	buckets  atomic.Int64
}

// Start starts the binary at bin on a new temporary directory named after prefix and
// waits until it accepts connections.
func Start(bin, prefix string) (*Server, error) {
	dir, err := os.MkdirTemp("", prefix+"-s3-")
	if err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(dir, "data"), filepath.Join(dir, "meta")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Endpoint: "http://127.0.0.1:" + port, bin: bin, addr: "127.0.0.1:" + port, dir: dir}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	return s, nil
}

// launch starts the server process on s's address and directory and waits until it
// accepts connections.
func (s *Server) launch() error {
	data, meta := filepath.Join(s.dir, "data"), filepath.Join(s.dir, "meta")
	s.stderr.Reset()
	s.exited = make(chan struct{})
	s.cmd = exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--region", "us-east-1", "--port", s.addr,
		"posix", "--sidecar", meta, data)
	s.cmd.Stderr = &s.stderr
	s.cmd.Stdout = &s.stderr
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("s3test: start %s: %w", s.bin, err)
	}
	exited := s.exited
	go func() {
		_ = s.cmd.Wait()
		close(exited)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("s3test: %s exited: %s", s.bin, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("s3test: %s did not listen on %s within 30s: %s", s.bin, s.addr, s.stderr.String())
		}
	}
}

// Kill kills the server process (by its pid) and keeps its directory: the buckets
// refuse every request until Restart.
func (s *Server) Kill() error { return s.kill() }

// Restart starts the server again on the same address and directory, after Kill.
func (s *Server) Restart() error {
	select {
	case <-s.exited:
	default:
		return fmt.Errorf("s3test: restart: the server at %s is running", s.addr)
	}
	return s.launch()
}

func (s *Server) kill() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	err := s.cmd.Process.Kill()
	<-s.exited
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// NewBucket creates a new, empty bucket named after prefix and returns its URL for
// gocloud.dev/blob's s3blob driver.
func (s *Server) NewBucket(prefix string) (string, error) {
	name := fmt.Sprintf("%s-%d", prefix, s.buckets.Add(1))
	// The posix backend's buckets are the directories of its root.
	if err := os.Mkdir(filepath.Join(s.dir, "data", name), 0o755); err != nil {
		return "", fmt.Errorf("s3test: create bucket %s: %w", name, err)
	}
	q := url.Values{"endpoint": {s.Endpoint}, "region": {"us-east-1"}, "use_path_style": {"true"}}
	return "s3://" + name + "?" + q.Encode(), nil
}

// Stop kills the server (by its pid) and removes its directory.
func (s *Server) Stop() error {
	err := s.kill()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// BucketURL returns a new bucket's URL for one test: on the server srv when it is
// not nil, a file:// bucket in a temporary directory otherwise.
func BucketURL(t testing.TB, srv *Server, prefix string) string {
	t.Helper()
	if srv == nil {
		return "file://" + filepath.ToSlash(t.TempDir())
	}
	u, err := srv.NewBucket(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// FromEnv starts a server when BinaryEnv names a binary, and returns nil otherwise.
func FromEnv(prefix string) (*Server, error) {
	bin := os.Getenv(BinaryEnv)
	if bin == "" {
		return nil, nil
	}
	return Start(bin, prefix)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
