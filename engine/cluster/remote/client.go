package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Client is an engine.DB whose engine runs in another process, a Server's, reached
// over Arrow Flight. Its methods mean what *engine.Engine's do: a write that returns
// nil was taken by the remote engine (it is in its next checkpoint), WaitCheckpoint
// returns once the remote engine committed, and Scan streams the committed rows. An
// error from the remote engine keeps its text, prefixed with the address;
// engine.ErrClosed, engine.ErrReadOnly (a served replica), context.Canceled and
// context.DeadlineExceeded survive the trip (errors.Is), and a server that does not
// answer is ErrUnavailable. Every method is safe for concurrent use.
type Client struct {
	addr   string
	client flight.Client
	mem    memory.Allocator
	closed atomic.Bool
}

var _ engine.DB = (*Client)(nil)

// Dial connects to the Server at addr (host:port, no TLS) and checks that it answers
// as a weir engine (it lists the server's actions). mem is what
// decoding scanned records allocates from (nil: the Go allocator).
func Dial(ctx context.Context, addr string, mem memory.Allocator) (*Client, error) {
	if mem == nil {
		mem = memory.NewGoAllocator()
	}
	fc, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxMessageBytes), grpc.MaxCallRecvMsgSize(MaxMessageBytes)))
	if err != nil {
		return nil, fmt.Errorf("remote %s: dial: %w", addr, err)
	}
	c := &Client{addr: addr, client: fc, mem: mem}
	if err := c.ping(ctx); err != nil {
		fc.Close()
		return nil, err
	}
	return c, nil
}

// ping lists the server's actions, so that Dial fails on an address nobody serves
// and on a Flight server that is not a weir engine's.
func (c *Client) ping(ctx context.Context) error {
	s, err := c.client.ListActions(ctx, &flight.Empty{})
	if err != nil {
		return c.fromStatus("dial", err)
	}
	found := false
	for {
		a, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c.fromStatus("dial", err)
		}
		found = found || a.GetType() == actionWaitCheckpoint
	}
	if !found {
		return fmt.Errorf("remote %s: dial: the Flight server there does not serve a weir engine (no %s action)", c.addr, actionWaitCheckpoint)
	}
	return nil
}

// Addr is the server's address.
func (c *Client) Addr() string { return c.addr }

// fromStatus turns a failed call's status back into an error naming the server.
func (c *Client) fromStatus(what string, err error) error {
	if err == nil {
		return nil
	}
	if c.closed.Load() {
		return fmt.Errorf("remote %s: %s: the client is closed: %w", c.addr, what, engine.ErrClosed)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("remote %s: %s: %w", c.addr, what, err)
	}
	var base error
	switch st.Code() {
	case codes.Aborted:
		return fmt.Errorf("remote %s: %s: %w", c.addr, st.Message(), engine.ErrClosed)
	case codes.PermissionDenied:
		return fmt.Errorf("remote %s: %s: %w", c.addr, st.Message(), engine.ErrReadOnly)
	case codes.Unavailable:
		base = ErrUnavailable
	case codes.Canceled:
		base = context.Canceled
	case codes.DeadlineExceeded:
		base = context.DeadlineExceeded
	}
	if base != nil {
		return fmt.Errorf("remote %s: %s: %s: %w", c.addr, what, st.Message(), base)
	}
	// The engine's own error, which names what it concerns.
	return fmt.Errorf("remote %s: %s", c.addr, st.Message())
}

// usable refuses a call on a closed client (the Flight client is gone).
func (c *Client) usable(what string) error {
	if c.closed.Load() {
		return fmt.Errorf("remote %s: %s: the client is closed: %w", c.addr, what, engine.ErrClosed)
	}
	return nil
}

// ErrUnavailable is the error (errors.Is) of a call whose server did not answer: it is
// gone, or the connection broke. A write that fails so may or may not have been taken;
// a checkpoint after reconnecting, and a Scan, tell.
var ErrUnavailable = errors.New("the server is unavailable")

func (c *Client) do(ctx context.Context, what, action string, r request) ([]byte, error) {
	if err := c.usable(what); err != nil {
		return nil, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %s: %w", c.addr, what, err)
	}
	s, err := c.client.DoAction(ctx, &flight.Action{Type: action, Body: body})
	if err != nil {
		return nil, c.fromStatus(what, err)
	}
	res, err := s.Recv()
	if err != nil {
		return nil, c.fromStatus(what, err)
	}
	for {
		if _, err := s.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, c.fromStatus(what, err)
			}
			break
		}
	}
	return res.GetBody(), nil
}

// CreateTable implements engine.DB.
func (c *Client) CreateTable(ctx context.Context, t *schema.Table, opts engine.TableOptions) error {
	tj, err := engine.MarshalTable(t)
	if err != nil {
		return fmt.Errorf("remote %s: create table: %w", c.addr, err)
	}
	_, err = c.do(ctx, "create table "+t.Name, actionCreateTable, request{Table: tj, TableOpts: opts})
	return err
}

// CreateMV implements engine.DB.
func (c *Client) CreateMV(ctx context.Context, name string, plan engine.Plan, opts engine.MVOptions) error {
	pj, err := engine.MarshalPlan(plan)
	if err != nil {
		return fmt.Errorf("remote %s: create materialized view %s: %w", c.addr, name, err)
	}
	_, err = c.do(ctx, "create materialized view "+name, actionCreateMV, request{Name: name, Plan: pj, MVOpts: opts})
	return err
}

// DropMV implements engine.DB.
func (c *Client) DropMV(ctx context.Context, name string) error {
	_, err := c.do(ctx, "drop materialized view "+name, actionDropMV, request{Name: name})
	return err
}

// RescheduleMV implements engine.DB.
func (c *Client) RescheduleMV(ctx context.Context, name string, parallelism int) error {
	_, err := c.do(ctx, "reschedule materialized view "+name, actionRescheduleMV, request{Name: name, Parallelism: parallelism})
	return err
}

// PauseMV implements engine.DB.
func (c *Client) PauseMV(ctx context.Context, name string) error {
	_, err := c.do(ctx, "pause materialized view "+name, actionPauseMV, request{Name: name})
	return err
}

// ResumeMV implements engine.DB.
func (c *Client) ResumeMV(ctx context.Context, name string) error {
	_, err := c.do(ctx, "resume materialized view "+name, actionResumeMV, request{Name: name})
	return err
}

// SetRateLimit implements engine.DB.
func (c *Client) SetRateLimit(ctx context.Context, name string, limit *int64) error {
	_, err := c.do(ctx, "set the rate limit of materialized view "+name, actionSetRateLimit, request{Name: name, RateLimit: limit})
	return err
}

// Pause implements engine.DB.
func (c *Client) Pause(ctx context.Context) error {
	_, err := c.do(ctx, "pause", actionPause, request{})
	return err
}

// Resume implements engine.DB.
func (c *Client) Resume(ctx context.Context) error {
	_, err := c.do(ctx, "resume", actionResume, request{})
	return err
}

// Progress is the remote engine's engine.Engine.Progress: every job's progress now.
func (c *Client) Progress(ctx context.Context) ([]engine.JobProgress, error) {
	body, err := c.do(ctx, "progress", actionProgress, request{})
	if err != nil {
		return nil, err
	}
	var ps []engine.JobProgress
	if err := json.Unmarshal(body, &ps); err != nil {
		return nil, fmt.Errorf("remote %s: progress: bad result: %w", c.addr, err)
	}
	return ps, nil
}

// VnodeProgress is the remote engine's engine.Engine.VnodeProgress of view name.
func (c *Client) VnodeProgress(ctx context.Context, name string) ([]engine.VnodeProgress, error) {
	body, err := c.do(ctx, "progress per vnode of "+name, actionVnodeProgress, request{Name: name})
	if err != nil {
		return nil, err
	}
	var vs []engine.VnodeProgress
	if err := json.Unmarshal(body, &vs); err != nil {
		return nil, fmt.Errorf("remote %s: progress per vnode of %s: bad result: %w", c.addr, name, err)
	}
	return vs, nil
}

// WaitCheckpoint implements engine.DB.
func (c *Client) WaitCheckpoint(ctx context.Context) (executors.Epoch, error) {
	body, err := c.do(ctx, "wait for a checkpoint", actionWaitCheckpoint, request{})
	if err != nil {
		return 0, err
	}
	var r epochResult
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("remote %s: wait for a checkpoint: bad result %q: %w", c.addr, body, err)
	}
	return executors.Epoch(r.Epoch), nil
}

// Insert implements engine.DB.
func (c *Client) Insert(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return c.write(ctx, "insert", table, rec)
}

// Upsert implements engine.DB.
func (c *Client) Upsert(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return c.write(ctx, "upsert", table, rec)
}

// Update implements engine.DB.
func (c *Client) Update(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return c.write(ctx, "update", table, rec)
}

// Delete implements engine.DB.
func (c *Client) Delete(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return c.write(ctx, "delete", table, rec)
}

// write sends rec in one DoPut and waits for the server's acknowledgement.
func (c *Client) write(ctx context.Context, op, table string, rec arrow.RecordBatch) error {
	what := op + " " + table
	if err := c.usable(what); err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("remote %s: %s: no record", c.addr, what)
	}
	if n := recordBytes(rec); n > MaxMessageBytes-(1<<20) {
		return fmt.Errorf("remote %s: %s: a record of %d rows and about %d MiB is over a write's limit of %d MiB: write it in slices", c.addr, what, rec.NumRows(), n>>20, MaxMessageBytes>>20)
	}
	cmd, err := json.Marshal(request{Name: table, Op: op})
	if err != nil {
		return fmt.Errorf("remote %s: %s: %w", c.addr, what, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.client.DoPut(ctx)
	if err != nil {
		return c.fromStatus(what, err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(c.mem))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	err = w.Write(rec)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = stream.CloseSend()
	}
	acked := false
	for {
		_, rerr := stream.Recv()
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return c.fromStatus(what, rerr)
			}
			break
		}
		acked = true
	}
	if err != nil {
		return c.fromStatus(what, err)
	}
	if !acked {
		return fmt.Errorf("remote %s: %s: the server ended the write without acknowledging it", c.addr, what)
	}
	return nil
}

// recordBytes is the size of rec's buffers, about what its IPC message takes.
func recordBytes(rec arrow.RecordBatch) int {
	n := 0
	var add func(d arrow.ArrayData)
	add = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += b.Len()
			}
		}
		for _, c := range d.Children() {
			add(c)
		}
	}
	for _, col := range rec.Columns() {
		add(col.Data())
	}
	return n
}

// Scan implements engine.DB: the rows stream from the server as they are read; the
// reader's Err reports a stream that broke. Release the reader to end the stream.
func (c *Client) Scan(ctx context.Context, name string) (array.RecordReader, error) {
	what := "scan " + name
	if err := c.usable(what); err != nil {
		return nil, err
	}
	t, err := json.Marshal(request{Name: name})
	if err != nil {
		return nil, fmt.Errorf("remote %s: %s: %w", c.addr, what, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.client.DoGet(ctx, &flight.Ticket{Ticket: t})
	if err != nil {
		cancel()
		return nil, c.fromStatus(what, err)
	}
	rdr, err := flight.NewRecordReader(stream, ipc.WithAllocator(c.mem))
	if err != nil {
		cancel()
		return nil, c.fromStatus(what, err)
	}
	return &scanReader{Reader: rdr, c: c, what: what, cancel: cancel}, nil
}

// scanReader is a Scan's reader: it names the server in a stream's error and ends the
// stream when released.
type scanReader struct {
	*flight.Reader
	c      *Client
	what   string
	cancel context.CancelFunc
	refs   atomic.Int64 // extra references from Retain
}

func (r *scanReader) Retain() { r.refs.Add(1); r.Reader.Retain() }

func (r *scanReader) Release() {
	if r.refs.Add(-1) < 0 {
		r.cancel()
	}
	r.Reader.Release()
}

func (r *scanReader) Err() error {
	err := r.Reader.Err()
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	return r.c.fromStatus(r.what, err)
}

// Close implements engine.DB: it closes the connection. The remote engine goes on;
// later calls fail with an error that is engine.ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.client.Close()
}
