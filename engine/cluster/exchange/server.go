package exchange

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine/cluster/wire"
	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is the receiving side of a process's exchange edges: a Flight service whose
// DoExchange accepts one stream per edge and hands the edge's messages to its Inbox.
// An edge is accepted only once Expect has registered it, and only one stream at a
// time; the first message of a stream names the edge (see Edge). Every method is safe
// for concurrent use.
type Server struct {
	flight.BaseFlightServer
	mem memory.Allocator

	mu      sync.Mutex
	inboxes map[Edge]*Inbox
}

// NewServer returns a server whose decoded chunks take their op and visibility buffers
// from mem.
func NewServer(mem memory.Allocator) *Server {
	return &Server{mem: mem, inboxes: map[Edge]*Inbox{}}
}

// MaxMessageBytes bounds one Flight message of an edge, a chunk's record with its
// metadata (grpc's default, 4 MiB, is below a chunk of wide rows).
const MaxMessageBytes = 256 << 20

// NewFlightServer returns a Flight server serving s. window, when positive, fixes the
// HTTP/2 stream and connection flow-control windows (at least 64 KiB; grpc ignores a
// smaller one), which bounds what a slow inbox lets its sender buffer; 0 keeps grpc's
// default, a window that grows with the measured bandwidth.
func NewFlightServer(s *Server, window int32) flight.Server {
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes)}
	if window > 0 {
		opts = append(opts, grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window))
	}
	fs := flight.NewServerWithMiddleware(nil, opts...)
	fs.RegisterFlightService(s)
	return fs
}

// Inbox is where one edge's messages arrive, in order. Messages is closed when the
// edge's stream ends; Err then says how: nil after the sender's Close, an error naming
// the edge otherwise (the sender went away, the stream broke, a message did not
// decode). The receiver owns, and releases, every message it takes.
type Inbox struct {
	edge   Edge
	schema *arrow.Schema
	ch     chan executors.Message
	done   chan struct{} // closed right after ch: for watchers that do not read ch

	attached bool // guarded by Server.mu
	err      error

	abort    chan struct{} // closed by Abort: the receiver is gone
	abortErr error         // set before abort closes
	aborted  sync.Once
	// acking is held from a barrier's delivery into ch to its ack: a receiver that
	// goes right after taking a barrier (an Update that stops it) still has it
	// acknowledged before DoExchange ends the stream.
	acking sync.Mutex
}

// testingBeforeAck, when set, is called after a barrier is delivered into its inbox
// and before it is acknowledged.
var testingBeforeAck func(Edge)

// Edge is the inbox's edge.
func (in *Inbox) Edge() Edge { return in.edge }

// Messages is the channel of the edge's messages; it holds at most the capacity given
// to Expect, and a full channel stops the stream (backpressure).
func (in *Inbox) Messages() <-chan executors.Message { return in.ch }

// Err reports how the stream ended. Call it only after Messages is closed.
func (in *Inbox) Err() error { return in.err }

// Expect registers edge, whose chunks have the given schema (nil: not checked), with
// a channel of capacity messages. It fails when the edge is already registered.
func (s *Server) Expect(edge Edge, schema *arrow.Schema, capacity int) (*Inbox, error) {
	if capacity < 0 {
		return nil, fmt.Errorf("exchange: %s: negative inbox capacity %d", edge, capacity)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.inboxes[edge]; ok {
		return nil, fmt.Errorf("exchange: %s is already expected", edge)
	}
	in := &Inbox{edge: edge, schema: schema, ch: make(chan executors.Message, capacity), done: make(chan struct{}), abort: make(chan struct{})}
	s.inboxes[edge] = in
	return in, nil
}

// Forget unregisters edge if no stream has attached to it yet: its inbox closes, and
// its Err is err. An attached edge is left to its stream, which ends it. Forget
// reports whether it unregistered the edge.
func (s *Server) Forget(edge Edge, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.inboxes[edge]
	if !ok || in.attached {
		return false
	}
	delete(s.inboxes, edge)
	in.end(err)
	return true
}

// Abort ends edge's inbox for err, whose receiver is gone: an edge no stream
// attached to is forgotten (as Forget does); an attached one's stream is cut, so
// that its sender sees the edge broken, and the inbox closes once the stream's
// handler has let go of it.
func (s *Server) Abort(edge Edge, err error) {
	if s.Forget(edge, err) {
		return
	}
	s.mu.Lock()
	in, ok := s.inboxes[edge]
	s.mu.Unlock()
	if !ok {
		return
	}
	in.aborted.Do(func() {
		in.abortErr = err
		close(in.abort)
	})
}

// forgetUnattached forgets every edge no stream has attached to, with an error naming
// the edge and saying why.
func (s *Server) forgetUnattached(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for edge, in := range s.inboxes {
		if !in.attached {
			delete(s.inboxes, edge)
			in.end(fmt.Errorf("exchange: %s: %s", edge, why))
		}
	}
}

// end closes the inbox with err.
func (in *Inbox) end(err error) {
	in.err = err
	close(in.ch)
	close(in.done)
}

func (s *Server) attach(edge Edge) (*Inbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.inboxes[edge]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "exchange: %s is not expected here", edge)
	}
	if in.attached {
		return nil, status.Errorf(codes.AlreadyExists, "exchange: %s already has a stream", edge)
	}
	in.attached = true
	return in, nil
}

func (s *Server) detach(in *Inbox, err error) {
	s.mu.Lock()
	delete(s.inboxes, in.edge)
	s.mu.Unlock()
	in.end(err)
}

// DoExchange serves one edge's stream: it reads the opening message, answers it with
// an Ack of epoch 0 (the stream is accepted), then decodes each message into the
// edge's inbox, acknowledging each barrier once the inbox has taken it.
func (s *Server) DoExchange(stream flight.FlightService_DoExchangeServer) error {
	first, err := stream.Recv()
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "exchange: stream ended before naming its edge: %v", err)
	}
	edge, err := parseDescriptor(first.FlightDescriptor)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	in, err := s.attach(edge)
	if err != nil {
		return err
	}
	// The stream is served on its own goroutine, so that a receiver that goes
	// away (Abort) ends the handler, and with it the stream, while the goroutine
	// is blocked reading it: the stream's context ends then, which ends the
	// goroutine, and only it closes the inbox.
	done := make(chan error, 1)
	go func() {
		err := s.serve(stream, in)
		s.detach(in, err)
		done <- err
	}()
	select {
	case err = <-done:
	case <-in.abort:
		// A barrier the inbox took before the receiver went is acknowledged first:
		// the receiver had it.
		in.acking.Lock()
		defer in.acking.Unlock()
		return status.Error(codes.Aborted, in.abortErr.Error())
	}
	if err != nil {
		return status.Error(codes.Aborted, err.Error())
	}
	return nil
}

func (s *Server) serve(stream flight.FlightService_DoExchangeServer, in *Inbox) error {
	var ack []byte
	if err := stream.Send(&flight.FlightData{AppMetadata: wire.AppendAck(ack[:0], 0)}); err != nil {
		return fmt.Errorf("exchange: %s: accepting the stream: %w", in.edge, err)
	}
	push := &pushReader{}
	var rdr *ipc.Reader
	defer func() {
		if rdr != nil {
			rdr.Release()
		}
	}()
	ctx := stream.Context()
	for {
		fd, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("exchange: %s: the stream ended without its sender's close", in.edge)
		}
		if err != nil {
			return fmt.Errorf("exchange: %s: %w", in.edge, err)
		}
		var rec arrow.RecordBatch
		if len(fd.DataHeader) > 0 {
			push.fd = fd
			if rdr == nil {
				// The first IPC message is the schema; the flight writer puts the
				// first chunk's metadata on it too, and the chunk's own message
				// follows.
				opts := []ipc.Option{ipc.WithAllocator(s.mem)}
				if in.schema != nil {
					opts = append(opts, ipc.WithSchema(in.schema))
				}
				if rdr, err = ipc.NewReaderFromMessageReader(push, opts...); err != nil {
					return fmt.Errorf("exchange: %s: schema: %w", in.edge, err)
				}
				continue
			}
			if !rdr.Next() {
				return fmt.Errorf("exchange: %s: record: %v", in.edge, rdr.Err())
			}
			rec = rdr.RecordBatch()
		}
		if k, _, err := wire.ReadHeader(fd.AppMetadata); err == nil && k == wire.KindEnd {
			if err := wire.DecodeEnd(fd.AppMetadata); err != nil || rec != nil {
				return fmt.Errorf("exchange: %s: malformed end (%v)", in.edge, err)
			}
			return nil
		}
		m, err := wire.DecodeMessage(s.mem, fd.AppMetadata, rec)
		if err != nil {
			return fmt.Errorf("exchange: %s: %w", in.edge, err)
		}
		barrier := m.Barrier != nil
		var curr executors.Epoch // the barrier's, read before m is the receiver's
		if barrier {
			curr = m.Barrier.Curr
			in.acking.Lock()
			select {
			case <-in.abort:
				// DoExchange has returned (it takes acking once the receiver has
				// gone): the stream is not this goroutine's to write to.
				in.acking.Unlock()
				m.Release()
				return fmt.Errorf("exchange: %s: %w", in.edge, in.abortErr)
			default:
				// Until this unlocks, DoExchange waits: the ack below is sent on a
				// stream it has not ended, whichever case the next select takes.
			}
		}
		select {
		case in.ch <- m:
		case <-in.abort:
			// The receiver went before it took m: the handler returns (or has
			// returned), and the stream is not this goroutine's to write to.
			if barrier {
				in.acking.Unlock()
			}
			m.Release()
			return fmt.Errorf("exchange: %s: %w", in.edge, in.abortErr)
		case <-ctx.Done():
			if barrier {
				in.acking.Unlock()
			}
			m.Release()
			return fmt.Errorf("exchange: %s: %w", in.edge, ctx.Err())
		}
		if barrier {
			if testingBeforeAck != nil {
				testingBeforeAck(in.edge)
			}
			// Delivered: acknowledged even when the receiver has gone since, which
			// DoExchange waits for.
			ack = wire.AppendAck(ack[:0], curr)
			err := stream.Send(&flight.FlightData{AppMetadata: ack})
			in.acking.Unlock()
			if err != nil {
				return fmt.Errorf("exchange: %s: acknowledging barrier %d: %w", in.edge, curr, err)
			}
		}
	}
}

// pushReader hands the ipc reader exactly the one Flight message put in fd, so that
// records can be decoded one Flight message at a time between messages that carry
// metadata alone.
type pushReader struct {
	fd  *flight.FlightData
	msg *ipc.Message
}

func (p *pushReader) Message() (*ipc.Message, error) {
	if p.fd == nil {
		return nil, errors.New("a Flight message holds one IPC message, and dictionaries are not supported")
	}
	if p.msg != nil {
		p.msg.Release()
	}
	p.msg = ipc.NewMessage(memory.NewBufferBytes(p.fd.DataHeader), memory.NewBufferBytes(p.fd.DataBody))
	p.fd = nil
	return p.msg, nil
}

func (p *pushReader) Retain() {}

func (p *pushReader) Release() {
	if p.msg != nil {
		p.msg.Release()
		p.msg = nil
	}
}
