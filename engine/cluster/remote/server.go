package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server serves an engine.DB (an *engine.Engine) to remote clients over Arrow Flight:
// DoAction for the catalog calls and WaitCheckpoint, DoPut for writes, DoGet for
// Scan. NewFlightServer serves it. The engine stays the caller's to close, after the
// Flight server stops.
type Server struct {
	flight.BaseFlightServer
	db  engine.DB
	mem memory.Allocator
}

// NewServer returns a server of db; mem is what decoding written records allocates
// from.
func NewServer(db engine.DB, mem memory.Allocator) *Server {
	return &Server{db: db, mem: mem}
}

// MaxMessageBytes bounds one Flight message: a written record, or a scanned one
// (grpc's default, 4 MiB, is below a write of a few hundred thousand rows).
const MaxMessageBytes = 256 << 20

// NewFlightServer returns a Flight server serving s (call InitListener and Serve).
func NewFlightServer(s *Server) flight.Server {
	fs := flight.NewServerWithMiddleware(nil, grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes))
	fs.RegisterFlightService(s)
	return fs
}

// statusOf turns an engine error into the status a client maps back (see fromStatus).
func statusOf(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrClosed):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, engine.ErrReadOnly):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

// actions are the server's Flight actions, as ListActions lists them.
var actions = []*flight.ActionType{
	{Type: actionCreateTable, Description: "create a table: {table: engine.MarshalTable, table_opts}"},
	{Type: actionCreateMV, Description: "create a materialized view: {name, plan: engine.MarshalPlan, mv_opts}"},
	{Type: actionDropMV, Description: "drop a materialized view: {name}"},
	{Type: actionRescheduleMV, Description: "reschedule a materialized view: {name, parallelism}"},
	{Type: actionWaitCheckpoint, Description: "wait for a checkpoint: {} -> {epoch}"},
	{Type: actionPauseMV, Description: "pause a view's backfill: {name}"},
	{Type: actionResumeMV, Description: "resume a view's backfill: {name}"},
	{Type: actionSetRateLimit, Description: "set a view's backfill rate limit: {name, rate_limit (absent: unlimited)}"},
	{Type: actionPause, Description: "pause every backfill: {}"},
	{Type: actionResume, Description: "resume every backfill: {}"},
	{Type: actionProgress, Description: "every job's progress: {} -> [engine.JobProgress]"},
	{Type: actionVnodeProgress, Description: "a view's progress per upstream vnode: {name} -> [engine.VnodeProgress]"},
}

// Progresser is what a served engine gives for the progress actions; *engine.Engine
// has it.
type Progresser interface {
	Progress() []engine.JobProgress
	VnodeProgress(name string) ([]engine.VnodeProgress, error)
}

// ListActions lists the actions DoAction takes (a client's Dial calls it to check
// that a weir engine answers).
func (s *Server) ListActions(_ *flight.Empty, stream flight.FlightService_ListActionsServer) error {
	for _, a := range actions {
		if err := stream.Send(a); err != nil {
			return err
		}
	}
	return nil
}

// DoAction runs one catalog call or WaitCheckpoint.
func (s *Server) DoAction(a *flight.Action, stream flight.FlightService_DoActionServer) error {
	ctx := stream.Context()
	r, err := decodeRequest(a.GetType(), a.GetBody())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	var body []byte
	switch a.GetType() {
	case actionCreateTable:
		t, err := engine.UnmarshalTable(r.Table)
		if err != nil {
			return status.Error(codes.InvalidArgument, "create table: "+err.Error())
		}
		err = s.db.CreateTable(ctx, t, r.TableOpts)
		if err != nil {
			return statusOf(err)
		}
	case actionCreateMV:
		if err := r.needName("create materialized view"); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		p, err := engine.UnmarshalPlan(r.Plan)
		if err != nil {
			return status.Error(codes.InvalidArgument, fmt.Sprintf("create materialized view %s: %v", r.Name, err))
		}
		if err := s.db.CreateMV(ctx, r.Name, p, r.MVOpts); err != nil {
			return statusOf(err)
		}
	case actionDropMV:
		if err := r.needName("drop materialized view"); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.db.DropMV(ctx, r.Name); err != nil {
			return statusOf(err)
		}
	case actionRescheduleMV:
		if err := r.needName("reschedule materialized view"); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.db.RescheduleMV(ctx, r.Name, r.Parallelism); err != nil {
			return statusOf(err)
		}
	case actionPauseMV, actionResumeMV, actionSetRateLimit:
		if err := r.needName(a.GetType()); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		var err error
		switch a.GetType() {
		case actionPauseMV:
			err = s.db.PauseMV(ctx, r.Name)
		case actionResumeMV:
			err = s.db.ResumeMV(ctx, r.Name)
		default:
			err = s.db.SetRateLimit(ctx, r.Name, r.RateLimit)
		}
		if err != nil {
			return statusOf(err)
		}
	case actionPause, actionResume:
		f := s.db.Pause
		if a.GetType() == actionResume {
			f = s.db.Resume
		}
		if err := f(ctx); err != nil {
			return statusOf(err)
		}
	case actionProgress, actionVnodeProgress:
		p, ok := s.db.(Progresser)
		if !ok {
			return status.Errorf(codes.Unimplemented, "%s: the served engine reports no progress", a.GetType())
		}
		var v any
		if a.GetType() == actionProgress {
			v = p.Progress()
		} else {
			if err := r.needName("progress per vnode"); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			vs, err := p.VnodeProgress(r.Name)
			if err != nil {
				return statusOf(err)
			}
			v = vs
		}
		var err error
		if body, err = json.Marshal(v); err != nil {
			return status.Errorf(codes.Internal, "%s: %v", a.GetType(), err)
		}
	case actionWaitCheckpoint:
		epoch, err := s.db.WaitCheckpoint(ctx)
		if err != nil {
			return statusOf(err)
		}
		body, _ = json.Marshal(epochResult{Epoch: uint64(epoch)})
	default:
		return status.Errorf(codes.Unimplemented, "action %q: not a weir action", a.GetType())
	}
	return stream.Send(&flight.Result{Body: body})
}

// DoPut writes each record of the stream into the table its descriptor names, and
// acknowledges each once the engine took it (the engine's write returned nil).
func (s *Server) DoPut(stream flight.FlightService_DoPutServer) error {
	ctx := stream.Context()
	rdr, err := flight.NewRecordReader(stream, ipc.WithAllocator(s.mem))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "write: the stream holds no schema: %v", err)
	}
	defer rdr.Release()
	d := rdr.LatestFlightDescriptor()
	if d == nil || d.GetType() != flight.DescriptorCMD {
		return status.Error(codes.InvalidArgument, "write: the stream's descriptor is not a weir write command")
	}
	r, err := decodeRequest("write", d.GetCmd())
	if err == nil {
		err = r.checkOp()
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	write := map[string]func(context.Context, string, arrow.RecordBatch) error{
		"insert": s.db.Insert, "upsert": s.db.Upsert, "update": s.db.Update, "delete": s.db.Delete,
	}[r.Op]
	n := 0
	for rdr.Next() {
		if err := write(ctx, r.Name, rdr.RecordBatch()); err != nil {
			return statusOf(err)
		}
		n++
		ack, _ := json.Marshal(map[string]int{"records": n})
		if err := stream.Send(&flight.PutResult{AppMetadata: ack}); err != nil {
			return err
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return status.Errorf(codes.InvalidArgument, "write %s: record %d: %v", r.Name, n+1, err)
	}
	return nil
}

// DoGet streams a Scan of the table or view the ticket names, at the committed epoch.
func (s *Server) DoGet(t *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	r, err := decodeRequest("scan", t.GetTicket())
	if err == nil {
		err = r.needName("scan")
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	rr, err := s.db.Scan(stream.Context(), r.Name)
	if err != nil {
		return statusOf(err)
	}
	defer rr.Release()
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rr.Schema()), ipc.WithAllocator(s.mem))
	for rr.Next() {
		if err := w.Write(rr.RecordBatch()); err != nil {
			w.Close()
			return err
		}
	}
	if err := rr.Err(); err != nil {
		w.Close()
		return statusOf(fmt.Errorf("scan %s: %w", r.Name, err))
	}
	return w.Close()
}
