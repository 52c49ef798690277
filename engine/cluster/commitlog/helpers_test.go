package commitlog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/internal/s3test"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"gocloud.dev/blob"
)

// cluster is a meta store on a new database and a new bucket (on the S3-protocol
// server under make test-s3, else file:// in a temporary directory), both closed
// when the test ends.
type cluster struct {
	dsn       string
	meta      *meta.Store
	bucket    *blob.Bucket
	bucketURL string
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	ctx := testContext(t)
	dsn := server.NewDatabase(t, "commitlog_test")
	m, err := meta.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	url := s3test.BucketURL(t, s3, "commitlog")
	t.Logf("bucket %s", url)
	b, err := objstore.OpenBucket(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &cluster{dsn: dsn, meta: m, bucket: b, bucketURL: url}
}

// open opens a log for node on c, closed when the test ends.
func (c *cluster) open(t *testing.T, node uint64) *commitlog.Log {
	t.Helper()
	return openLog(t, c.config(node))
}

// openLog opens a log of cfg, closed when the test ends.
func openLog(t *testing.T, cfg commitlog.Config) *commitlog.Log {
	t.Helper()
	l, err := commitlog.Open(testContext(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// openLeader opens an engine in a new directory that commits through log, with the kv
// table created, closed when the test ends (before the log).
func openLeader(t *testing.T, log engine.CommitLog) *engine.Engine {
	t.Helper()
	e := openEngine(t, filepath.Join(t.TempDir(), "leader"), log)
	t.Cleanup(func() { e.Close() })
	if err := e.CreateTable(testContext(t), kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (c *cluster) config(node uint64) commitlog.Config {
	return commitlog.Config{Meta: c.meta, Bucket: c.bucket, BucketURL: c.bucketURL, Node: node, Grace: -1, TableBytes: 4 << 10}
}

// openEngine opens an engine in dir that commits through log (nil: into dir),
// barrier by barrier.
func openEngine(t *testing.T, dir string, log engine.CommitLog) *engine.Engine {
	t.Helper()
	return openEngineWith(t, dir, log, false)
}

// openEngineWith is openEngine, with a store per node when nodeStores is set.
func openEngineWith(t *testing.T, dir string, log engine.CommitLog, nodeStores bool) *engine.Engine {
	t.Helper()
	return openEngineControl(t, dir, log, nodeStores, nil)
}

// openEngineControl is openEngineWith whose nodes are reached through ctl (nil:
// calls in the process).
func openEngineControl(t *testing.T, dir string, log engine.CommitLog, nodeStores bool, ctl engine.Control) *engine.Engine {
	t.Helper()
	opts := engine.Options{BarrierInterval: -1, Nodes: 2, NodeStores: nodeStores, Control: ctl}
	if log != nil {
		opts.CommitLog = log
	}
	e, err := engine.Open(testContext(t), dir, opts)
	if err != nil {
		t.Fatalf("open engine in %s: %v", dir, err)
	}
	return e
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// kv is the test's table: k int64 (the pk), v varchar, n int64.
var kv = &schema.Table{
	Name: "kv",
	Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "v", Type: schema.Type{Kind: schema.Varchar}},
		{Name: "n", Type: schema.Type{Kind: schema.Int64}},
	},
	PK: []schema.KeyColumn{{Column: 0}},
}

// write applies op to rows of kv.
func write(t *testing.T, e *engine.Engine, op func(context.Context, string, arrow.RecordBatch) error, rows ...[]any) {
	t.Helper()
	b := vec.NewChunkBuilder(memory.DefaultAllocator, kv)
	defer b.Release()
	for _, r := range rows {
		if err := b.AppendRow(vec.Insert, r...); err != nil {
			t.Fatal(err)
		}
	}
	chunk, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer chunk.Release()
	if err := op(testContext(t), "kv", chunk.Record()); err != nil {
		t.Fatal(err)
	}
}

// scan is every row of name, as text, sorted.
func scan(t *testing.T, e engine.DB, name string) []string {
	t.Helper()
	r, err := e.Scan(testContext(t), name)
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	defer r.Release()
	var out []string
	for r.Next() {
		rec := r.RecordBatch()
		for i := range int(rec.NumRows()) {
			var row []string
			for c := range int(rec.NumCols()) {
				row = append(row, rec.Column(c).ValueStr(i))
			}
			out = append(out, fmt.Sprint(row))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	slices.Sort(out)
	return out
}

func checkpoint(t *testing.T, e *engine.Engine) executors.Epoch {
	t.Helper()
	ep, err := e.WaitCheckpoint(testContext(t))
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return ep
}

// bucketObjects lists the bucket's objects, sorted.
func bucketObjects(t *testing.T, b *blob.Bucket) []string {
	t.Helper()
	var out []string
	it := b.List(nil)
	for {
		o, err := it.Next(testContext(t))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.Key)
	}
	slices.Sort(out)
	return out
}
