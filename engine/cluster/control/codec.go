package control

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
)

// codecName is the codec's name and the content-subtype of the control streams: a
// call's content type is application/grpc+weir-control-v1, and a server picks the
// codec by it, so the control service can share a grpc.Server with services that
// use protobuf (Arrow Flight).
const codecName = "weir-control-v1"

// serviceName and streamName name the one method of the service; streamMethod is its
// full name, as a client calls it.
const (
	serviceName  = "weir.control.v1.Control"
	streamName   = "Stream"
	streamMethod = "/" + serviceName + "/" + streamName
)

// keepaliveTime is how long a connection may stay silent before either side pings
// it, and keepaliveTimeout how long a ping may go unanswered before the connection is
// closed (and its stream lost): a node whose machine vanishes without closing its
// socket is lost within their sum.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 10 * time.Second
)

func init() { encoding.RegisterCodecV2(codec{}) }

// rawFrame is the type the codec marshals: the bytes of one frame.
type rawFrame []byte

// codec moves frames as they are: each gRPC message of a control stream is one frame
// of this package's format, which AppendFrame and DecodeFrame write and read.
type codec struct{}

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*rawFrame)
	if !ok {
		return nil, fmt.Errorf("control: codec %s marshals frames, not %T", codecName, v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*f)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*rawFrame)
	if !ok {
		return fmt.Errorf("control: codec %s unmarshals frames, not %T", codecName, v)
	}
	*f = data.Materialize()
	return nil
}

// service is what the coordinator implements for grpc's registration check.
type service interface {
	serve(grpc.ServerStream) error
}

// serviceDesc describes the control service by hand: one bidirectional stream.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*service)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    streamName,
		Handler:       func(srv any, stream grpc.ServerStream) error { return srv.(service).serve(stream) },
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: "weir/engine/cluster/control",
}

// ServerOptions are the options a grpc.Server that serves a Coordinator needs: it
// pings a silent node's connection every 10 s and closes it when a ping goes
// unanswered for 10 s more, and it lets nodes ping as often as they do.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
	}
}
