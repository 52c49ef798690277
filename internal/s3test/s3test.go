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
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
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
	data, meta := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, meta} {
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
	addr := "127.0.0.1:" + port
	s := &Server{Endpoint: "http://" + addr, dir: dir, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--region", "us-east-1", "--port", addr,
		"posix", "--sidecar", meta, data)
	s.cmd.Stderr = &s.stderr
	s.cmd.Stdout = &s.stderr
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("s3test: start %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	os.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("s3test: %s exited: %s", bin, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("s3test: %s did not listen on %s within 30s: %s", bin, addr, s.stderr.String())
		}
	}
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
	var err error
	select {
	case <-s.exited:
	default:
		if kerr := s.cmd.Process.Kill(); kerr != nil && !errors.Is(kerr, os.ErrProcessDone) {
			err = kerr
		}
		<-s.exited
	}
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
