package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/spf13/cobra"
)

// clusterState is what weir cluster up started, in DIR/cluster.json: weir cluster
// down stops exactly that.
type clusterState struct {
	Meta      string           `json:"meta"`               // the DSN the servers commit to
	Postgres  *clusterPostgres `json:"postgres,omitempty"` // the private server up started (none with --meta)
	Bucket    string           `json:"bucket"`
	Processes []clusterProcess `json:"processes"`
}

type clusterPostgres struct {
	Script string `json:"script"` // scripts/pg.sh
	Dir    string `json:"dir"`    // a temporary directory of its own, removed by down
	Port   string `json:"port"`
}

type clusterProcess struct {
	Role    string   `json:"role"` // leader, replica-N, compute-N
	PID     int      `json:"pid"`
	Addr    string   `json:"addr"`
	Metrics string   `json:"metrics,omitempty"` // its Prometheus metrics and pprof address (up --metrics)
	Dir     string   `json:"dir"`
	Log     string   `json:"log"`
	Args    []string `json:"args"` // weir's arguments, to restart it with
	Said    string   `json:"said"` // the start of the line that gives its address
}

// launchProcess starts weir args as the process of role in the cluster in dir (its
// directory the --dir in args, its log under dir/logs) and waits for the line of
// its log that starts with said, whose rest is its address.
func launchProcess(dir, role, said string, args []string) (clusterProcess, error) {
	p := clusterProcess{Role: role, Dir: filepath.Join(dir, role), Log: filepath.Join(dir, "logs", role+".log"), Args: args, Said: said}
	var err error
	if p.PID, p.Addr, err = startLogged(args, p.Log, said); err != nil {
		return p, fmt.Errorf("%s: %w", role, err)
	}
	if slices.Contains(args, "--metrics-addr") {
		if p.Metrics = metricsAddr(p.Log, 0); p.Metrics == "" {
			return p, fmt.Errorf("%s: its log %s gives no metrics address", role, p.Log)
		}
	}
	return p, nil
}

// restart starts p again with its arguments (after it died), its log appended to.
func (p clusterProcess) restart() (clusterProcess, error) {
	before := logSize(p.Log)
	pid, addr, err := startLogged(p.Args, p.Log, p.Said)
	if err != nil {
		return p, fmt.Errorf("restart %s: %w", p.Role, err)
	}
	p.PID, p.Addr = pid, addr
	if p.Metrics != "" {
		p.Metrics = metricsAddr(p.Log, before)
	}
	return p, nil
}

// metricsAddr is the address of the first "metrics and pprof" line of log after
// offset from (the process serves them with --metrics-addr), or "".
func metricsAddr(log string, from int64) string {
	f, err := os.Open(log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if !strings.Contains(line, `msg="metrics and pprof"`) {
			continue
		}
		for _, field := range strings.Fields(line) {
			if a, ok := strings.CutPrefix(field, "addr="); ok {
				return a
			}
		}
	}
	return ""
}

// logSize is the size of log (0 when it does not exist yet).
func logSize(log string) int64 {
	fi, err := os.Stat(log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// weirCommand is how cluster up runs weir serve: this binary (tests replace it).
var weirCommand = func(args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, args...), nil
}

func newCluster() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Start and stop a local Weir cluster: PostgreSQL, a bucket, a committing server and read replicas",
	}
	cmd.AddCommand(newClusterUp(), newClusterDown())
	return cmd
}

// clusterUpOptions are what weir cluster up starts in a directory.
type clusterUpOptions struct {
	meta, script, exchange, control string
	bucket                          string // an existing bucket's URL (default: file://DIR/bucket)
	replicas, nodes                 int
	nodeStores                      bool
	metrics                         bool // every process serves its metrics and pprof (--metrics-addr on loopback)
}

func newClusterUp() *cobra.Command {
	var (
		dir    string
		o      = clusterUpOptions{}
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster in --dir",
		Long: `up creates --dir (which must not exist or be empty) and starts in it: a private
PostgreSQL server through scripts/pg.sh in a temporary directory (unless --meta names
one: an empty database),
a bucket (file://DIR/bucket, unless --bucket names one: an empty bucket, s3://
included), one weir serve that commits to them (the leader, node
1; with --node-stores a store per node of its own, exported apart and committed
together) and --replicas read replicas (weir serve --replica), each in the background with
its log under DIR/logs. It records what it started in DIR/cluster.json and prints
each server's address; weir cluster down --dir DIR stops exactly that. Reach the
leader with remote.Dial, weir status --addr and weir export --addr.

With --nodes N the leader is weir meta instead, and N compute processes (weir
compute --node 1 to N, each with its store under DIR) run every table's and view's
actors, exchanging Arrow over Flight and taking their builds and barriers over
control streams from the leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.nodes > 0 && (o.exchange != "channel" || o.control != "channel" || o.nodeStores) {
				return errors.New("cluster up: --nodes runs compute processes, whose edges are always Flight streams, their control gRPC streams and their stores their own: drop --exchange, --control and --node-stores")
			}
			st, err := clusterUp(cmd.Context(), dir, o)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
			}
			for _, p := range st.Processes {
				fmt.Fprintf(cmd.OutOrStdout(), "%s at %s (pid %d, log %s)", p.Role, p.Addr, p.PID, p.Log)
				if p.Metrics != "" {
					fmt.Fprintf(cmd.OutOrStdout(), ", metrics and pprof at %s", p.Metrics)
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "meta %s, bucket %s; stop with weir cluster down --dir %s\n", st.Meta, st.Bucket, dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory of the cluster (created; must not exist or be empty)")
	f.StringVar(&o.meta, "meta", "", "PostgreSQL DSN of an empty database to use instead of starting a private server")
	f.StringVar(&o.bucket, "bucket", "", "URL of an empty bucket to use instead of file://DIR/bucket (file://, s3://)")
	f.StringVar(&o.script, "pg-script", "", "scripts/pg.sh (default: found from the working directory upwards)")
	f.StringVar(&o.exchange, "exchange", "channel", "how edges between the leader's nodes travel: channel or flight")
	f.StringVar(&o.control, "control", "channel", "how the leader's actors report to its coordinator: channel or grpc")
	f.IntVar(&o.replicas, "replicas", 0, "read replicas to start")
	f.IntVar(&o.nodes, "nodes", 0, "compute processes to start (weir compute --node 1 to N) under a weir meta leader; 0: the leader is one weir serve")
	f.BoolVar(&o.nodeStores, "node-stores", false, "give each of the leader's nodes a store of its own (weir serve --node-stores)")
	f.BoolVar(&o.metrics, "metrics", false, "every process serves Prometheus metrics and pprof on a loopback port of its own (printed, and in cluster.json)")
	f.BoolVar(&asJSON, "json", false, "print the cluster's state as JSON")
	return cmd
}

func newClusterDown() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster weir cluster up started in --dir",
		Long: `down reads DIR/cluster.json and stops what up started there: each server by its pid
(SIGTERM, so the leader closes its engine with a last checkpoint, before the
compute processes stop; SIGKILL after 30s), only while that pid still runs with
its directory on its command line, then the private
PostgreSQL server, whose temporary directory it removes (with the version log: the
bucket and the servers' directories stay in DIR, but without the log they are only
copies).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("cluster down: --dir is required")
			}
			return clusterDown(dir, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the cluster")
	return cmd
}

// checkEmptyBucket fails unless the bucket at url can be opened and holds no object:
// a new cluster's log starts empty, and its collection would delete what another
// cluster left there.
func checkEmptyBucket(ctx context.Context, url string) error {
	b, err := objstore.OpenBucket(ctx, url)
	if err != nil {
		return err
	}
	defer b.Close()
	o, err := b.List(nil).Next(ctx)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("bucket %s: %w", url, err)
	}
	return fmt.Errorf("bucket %s is not empty (it holds %s): give a new cluster an empty one", url, o.Key)
}

func clusterUp(ctx context.Context, dir string, o clusterUpOptions) (st clusterState, err error) {
	meta, script, replicas, nodes := o.meta, o.script, o.replicas, o.nodes
	if dir == "" {
		return st, errors.New("cluster up: --dir is required")
	}
	if replicas < 0 || nodes < 0 || nodes > 63 {
		return st, fmt.Errorf("cluster up: --replicas %d --nodes %d", replicas, nodes)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return st, fmt.Errorf("cluster up: %s is not empty (a cluster there? weir cluster down --dir %s)", dir, dir)
	}
	if o.bucket != "" {
		if err := checkEmptyBucket(ctx, o.bucket); err != nil {
			return st, fmt.Errorf("cluster up: %w", err)
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return st, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return st, fmt.Errorf("cluster up: %w", err)
	}
	// On a failure, stop what was started.
	defer func() {
		if err != nil {
			_ = stopCluster(st, io.Discard)
		}
	}()
	st.Meta = meta
	if meta == "" {
		if script == "" {
			if script, err = findPGScript(); err != nil {
				return st, fmt.Errorf("cluster up: %w (or give --pg-script, or --meta)", err)
			}
		}
		port, err := freeTCPPort()
		if err != nil {
			return st, err
		}
		// Its own temporary directory: as root pg.sh runs the server as the
		// postgres user, who must reach it (DIR's parents may be private).
		pgDir, err := os.MkdirTemp("", "weir-cluster-pg-")
		if err != nil {
			return st, fmt.Errorf("cluster up: %w", err)
		}
		pg := &clusterPostgres{Script: script, Dir: pgDir, Port: port}
		st.Postgres = pg
		out, err := exec.CommandContext(ctx, script, "start", pg.Dir, port).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			return st, fmt.Errorf("cluster up: %s start %s %s: %w", script, pg.Dir, port, err)
		}
		fields := strings.Fields(string(out))
		if len(fields) == 0 {
			return st, fmt.Errorf("cluster up: %s printed no DSN", script)
		}
		st.Meta = fields[len(fields)-1]
	}
	st.Bucket = o.bucket
	if st.Bucket == "" {
		st.Bucket = "file://" + filepath.ToSlash(filepath.Join(dir, "bucket"))
		if err := os.MkdirAll(filepath.Join(dir, "bucket"), 0o755); err != nil {
			return st, fmt.Errorf("cluster up: %w", err)
		}
	}
	launch := func(role, cmd, said string, extra ...string) error {
		args := append([]string{cmd, "--dir", filepath.Join(dir, role), "--meta", st.Meta, "--bucket", st.Bucket}, extra...)
		if o.metrics {
			args = append(args, "--metrics-addr", "127.0.0.1:0")
		}
		p, err := launchProcess(dir, role, said, args)
		if err != nil {
			return fmt.Errorf("cluster up: %w", err)
		}
		st.Processes = append(st.Processes, p)
		return nil
	}
	start := func(role string, extra ...string) error {
		return launch(role, "serve", "serving ", append([]string{"--addr", "127.0.0.1:0"}, extra...)...)
	}
	if nodes > 0 {
		// The compute processes first: the meta's engine opens once they are all
		// connected. Stopped in the reverse order, the meta closes (a last
		// checkpoint) while they still run.
		port, err := freeFixedPort()
		if err != nil {
			return st, err
		}
		coordinator := "127.0.0.1:" + port
		for i := 1; i <= nodes; i++ {
			if err := launch(control.ComputeName(i), "compute", fmt.Sprintf("computing node %d at ", i), "--node", strconv.Itoa(i), "--coordinator", coordinator); err != nil {
				return st, err
			}
		}
		if err := launch("leader", "meta", "serving ", "--addr", "127.0.0.1:0", "--node", "1", "--compute", strconv.Itoa(nodes), "--control-addr", coordinator); err != nil {
			return st, err
		}
	} else {
		leader := []string{"--node", "1", "--exchange", o.exchange, "--control", o.control}
		if o.nodeStores {
			leader = append(leader, "--node-stores")
		}
		if err := start("leader", leader...); err != nil {
			return st, err
		}
	}
	for i := 1; i <= replicas; i++ {
		if err := start(fmt.Sprintf("replica-%d", i), "--replica"); err != nil {
			return st, err
		}
	}
	if err := writeClusterState(dir, st); err != nil {
		return st, fmt.Errorf("cluster up: %w", err)
	}
	return st, nil
}

// writeClusterState records st in dir/cluster.json, what cluster down stops.
func writeClusterState(dir string, st clusterState) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return os.WriteFile(filepath.Join(dir, "cluster.json"), append(b, '\n'), 0o644)
}

// startLogged starts weir args in a session of its own, its output into log, and
// waits until it prints a line that starts with said there (the rest is the
// address it returns).
func startLogged(args []string, log, said string) (pid int, addr string, err error) {
	cmd, err := weirCommand(args...)
	if err != nil {
		return 0, "", err
	}
	// Appended to: a restarted process's log follows its earlier run's.
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	before, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, "", err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // it outlives this command
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if addr := saidAddr(log, before, said); addr != "" {
			return cmd.Process.Pid, addr, nil
		}
		select {
		case err := <-exited:
			return 0, "", fmt.Errorf("weir %s exited (%v): %s", args[0], err, tail(log))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return 0, "", fmt.Errorf("weir %s did not say %q within 60s: %s", args[0], strings.TrimSpace(said), tail(log))
		}
	}
}

// saidAddr is the address in the first line of log after offset from that starts
// with said, or "".
func saidAddr(log string, from int64, said string) string {
	f, err := os.Open(log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if a, ok := strings.CutPrefix(s.Text(), said); ok {
			return strings.TrimSpace(a)
		}
	}
	return ""
}

// tail is the end of a log, for an error.
func tail(log string) string {
	b, _ := os.ReadFile(log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func clusterDown(dir string, w io.Writer) error {
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return fmt.Errorf("cluster down: %w (no cluster started in %s?)", err, dir)
	}
	var st clusterState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("cluster down: %s: %w", filepath.Join(dir, "cluster.json"), err)
	}
	if err := stopCluster(st, w); err != nil {
		return fmt.Errorf("cluster down: %w", err)
	}
	return os.Remove(filepath.Join(dir, "cluster.json"))
}

// stopCluster stops st's processes (replicas first, the leader last), then its
// PostgreSQL server.
func stopCluster(st clusterState, w io.Writer) error {
	var errs []error
	for i := len(st.Processes) - 1; i >= 0; i-- {
		p := st.Processes[i]
		stopped, err := stopServe(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (pid %d): %w", p.Role, p.PID, err))
			continue
		}
		if stopped {
			fmt.Fprintf(w, "stopped %s (pid %d)\n", p.Role, p.PID)
		} else {
			fmt.Fprintf(w, "%s (pid %d) was not running\n", p.Role, p.PID)
		}
	}
	if pg := st.Postgres; pg != nil {
		if out, err := exec.Command(pg.Script, "stop", pg.Dir, pg.Port).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s stop %s: %v: %s", pg.Script, pg.Dir, err, out))
		} else if err := os.RemoveAll(pg.Dir); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(w, "stopped PostgreSQL (removed %s)\n", pg.Dir)
		}
	}
	return errors.Join(errs...)
}

// stopServe stops p's process if that pid still runs weir serve on p's directory:
// SIGTERM, then SIGKILL after 30s. It reports whether it was running.
func stopServe(p clusterProcess) (bool, error) {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), p.Dir) {
		return false, nil // gone, or the pid is another process's now
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil {
		return false, nil
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !running(p.PID) {
			return true, nil
		}
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && running(p.PID) {
		return true, err
	}
	return true, nil
}

// awaitExit waits (up to 30 s) until pid, a child of this process that was killed,
// is gone: reaped, not only a zombie, whose other threads may still hold its files
// (and its store's lock) while its leader shows as one.
func awaitExit(pid int) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not exit within 30s of its kill", pid)
		}
	}
}

// running reports whether pid is a live process (not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// findPGScript finds scripts/pg.sh next to a go.mod from the working directory up.
func findPGScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "pg.sh")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/pg.sh not found from the working directory upwards")
		}
		dir = parent
	}
}

// freeFixedPort returns a free loopback port that the meta binds later, after the
// compute processes started: one below the kernel's range of ephemeral ports
// (/proc/sys/net/ipv4/ip_local_port_range), so that none of their own listeners on
// port 0 can take it meanwhile. Without that range it is freeTCPPort's.
func freeFixedPort() (string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	var lo int
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, _ = strconv.Atoi(f[0])
		}
	}
	const floor = 10000
	if lo <= floor+1000 {
		return freeTCPPort()
	}
	for range 100 {
		port := strconv.Itoa(floor + rand.IntN(lo-floor))
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return freeTCPPort()
}

func freeTCPPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
