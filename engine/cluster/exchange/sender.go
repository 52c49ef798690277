package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine/cluster/wire"
	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial returns a Flight client of the exchange server at addr, without TLS (loopback
// and tests). window, when positive, fixes the HTTP/2 flow-control windows of what the
// server sends back (acks); see NewFlightServer for the windows that bound a sender.
// Many Senders may share one client: their streams share its connection.
func Dial(addr string, window int32) (flight.Client, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxMessageBytes), grpc.MaxCallRecvMsgSize(MaxMessageBytes))}
	if window > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
	}
	c, err := flight.NewClientWithMiddleware(addr, nil, nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("exchange: dial %s: %w", addr, err)
	}
	return c, nil
}

// Sender is the sending side of one edge. Send and Close are for one goroutine at a
// time.
//
// A chunk, watermark or barrier is encoded and handed to the stream before Send
// returns; Send blocks while HTTP/2 flow control (the receiver's window, filled when
// its inbox is full) refuses more, so a slow receiver bounds the sender's memory. A
// barrier's Send further waits for the receiver's Ack: when it returns nil, the barrier
// and everything before it are in the receiver's inbox. A broken edge (the receiver
// went away, the connection dropped, the stream was cancelled) fails the Send that
// sees it, at the latest the next barrier's, and every later one, with an error naming
// the edge; a Send never drops a message silently.
type Sender struct {
	edge   Edge
	schema *arrow.Schema
	stream flight.FlightService_DoExchangeClient
	cancel context.CancelFunc
	mem    memory.Allocator
	w      *flight.Writer // made at the first chunk when schema was nil
	md     []byte

	acks    chan executors.Epoch
	done    chan struct{} // closed when the receive loop ends; recvErr is then set
	recvErr error

	err    error // sticky: the edge is broken or closed
	closed bool

	release context.CancelFunc // if not nil: called after cancel when the edge ends
}

// NewSender opens edge's stream on client for chunks of the given schema (nil: that
// of the first chunk sent) and waits until the receiver accepts it (its Server
// expects the edge). ctx bounds the edge's
// whole life: cancelling it breaks the edge. mem is what the IPC writer allocates from.
func NewSender(ctx context.Context, client flight.Client, edge Edge, schema *arrow.Schema, mem memory.Allocator) (*Sender, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := client.DoExchange(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("exchange: %s: opening the stream: %w", edge, err)
	}
	s := &Sender{
		edge:   edge,
		schema: schema,
		stream: stream,
		cancel: cancel,
		mem:    mem,
		acks:   make(chan executors.Epoch, 1),
		done:   make(chan struct{}),
	}
	if schema != nil {
		s.w = flight.NewRecordWriter(stream, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	}
	go s.receive()
	if err := stream.Send(&flight.FlightData{FlightDescriptor: edge.descriptor()}); err != nil {
		return nil, s.abort(fmt.Errorf("exchange: %s: opening the stream: %w", edge, s.cause(err)))
	}
	if err := s.awaitAck(ctx, 0); err != nil {
		return nil, s.abort(err)
	}
	return s, nil
}

// receive reads the receiver's acks until the stream ends.
func (s *Sender) receive() {
	defer close(s.done)
	for {
		fd, err := s.stream.Recv()
		if err != nil {
			s.recvErr = err
			return
		}
		e, err := wire.DecodeAck(fd.AppMetadata)
		if err == nil {
			select {
			case s.acks <- e:
				continue
			default:
				err = fmt.Errorf("ack of epoch %d that no barrier waits for", e)
			}
		}
		s.recvErr = fmt.Errorf("receiver broke the protocol: %w", err)
		s.cancel()
		return
	}
}

// cause is the error a failed stream operation stands for: grpc reports io.EOF from
// Send when the stream is over, and the stream's status from Recv.
func (s *Sender) cause(err error) error {
	if !errors.Is(err, io.EOF) {
		s.cancel()
		<-s.done
		return err
	}
	<-s.done
	if s.recvErr == nil || errors.Is(s.recvErr, io.EOF) {
		return errors.New("the receiver ended the stream")
	}
	return s.recvErr
}

// abort breaks the edge with err and releases the stream.
func (s *Sender) abort(err error) error {
	s.cancel()
	<-s.done
	s.releaseCtx()
	s.err = err
	return err
}

func (s *Sender) awaitAck(ctx context.Context, want executors.Epoch) error {
	select {
	case e := <-s.acks:
		if e != want {
			return fmt.Errorf("exchange: %s: ack of epoch %d, want %d", s.edge, e, want)
		}
		return nil
	case <-s.done:
		return fmt.Errorf("exchange: %s: waiting for the ack of epoch %d: %w", s.edge, want, s.cause(io.EOF))
	case <-ctx.Done():
		return fmt.Errorf("exchange: %s: waiting for the ack of epoch %d: %w", s.edge, want, ctx.Err())
	}
}

// Send sends m; the receiver then owns what it decodes, and m stays the caller's (it
// releases m's chunk as usual). A message that does not encode, or a chunk of another
// schema, fails without breaking the edge; any other failure breaks it (see Sender).
// Cancelling ctx while Send blocks breaks the edge too.
func (s *Sender) Send(ctx context.Context, m executors.Message) error {
	if s.err != nil {
		return s.err
	}
	select {
	case <-s.done:
		return s.abort(fmt.Errorf("exchange: %s: %w", s.edge, s.cause(io.EOF)))
	default:
	}
	md, err := wire.AppendMessage(s.md[:0], m)
	if err != nil {
		return fmt.Errorf("exchange: %s: %w", s.edge, err)
	}
	s.md = md
	if m.Chunk != nil {
		if s.w == nil {
			s.schema = m.Chunk.Record().Schema()
			s.w = flight.NewRecordWriter(s.stream, ipc.WithSchema(s.schema), ipc.WithAllocator(s.mem))
		} else if !m.Chunk.Record().Schema().Equal(s.schema) {
			return fmt.Errorf("exchange: %s: chunk of schema %s, the edge carries %s", s.edge, m.Chunk.Record().Schema(), s.schema)
		}
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, s.cancel)
		defer stop()
	}
	if m.Chunk != nil {
		err = s.w.WriteWithAppMetadata(m.Chunk.Record(), md)
	} else {
		err = s.stream.Send(&flight.FlightData{AppMetadata: md})
	}
	if err != nil {
		return s.abort(fmt.Errorf("exchange: %s: sending %v: %w", s.edge, m, s.cause(err)))
	}
	if m.Barrier != nil {
		if err := s.awaitAck(ctx, m.Barrier.Curr); err != nil {
			return s.abort(err)
		}
	}
	return nil
}

// Close ends the edge: it sends End, then waits until the receiver has taken every
// message and ended the stream. It returns nil only then, and otherwise the error that
// broke the edge. Close is idempotent.
func (s *Sender) Close() error {
	if s.closed {
		return s.err
	}
	s.closed = true
	if s.err != nil {
		return s.err
	}
	err := s.stream.Send(&flight.FlightData{AppMetadata: wire.AppendEnd(s.md[:0])})
	if err == nil {
		err = s.stream.CloseSend()
	}
	if err != nil {
		return s.abort(fmt.Errorf("exchange: %s: closing: %w", s.edge, s.cause(err)))
	}
	<-s.done
	if !errors.Is(s.recvErr, io.EOF) {
		return s.abort(fmt.Errorf("exchange: %s: closing: %w", s.edge, s.recvErr))
	}
	s.cancel()
	s.releaseCtx()
	s.err = fmt.Errorf("exchange: %s: the sender is closed", s.edge)
	return nil
}

func (s *Sender) releaseCtx() {
	if s.release != nil {
		s.release()
	}
}
