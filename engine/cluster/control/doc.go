// Package control is a cluster's control plane (docs/design.md §8): one gRPC stream
// per compute node between the leader's Coordinator and the node, over which the
// leader builds actors, injects barriers, tears the graph down and asks for a node's
// part of a checkpoint, and the node reports the barriers its actors collected, their
// failures and the epochs it sealed, and answers.
//
// # The service
//
// The service is described by hand (no protoc): one bidirectional stream method,
// /weir.control.v1.Control/Stream, whose messages are frames of this package's
// versioned binary format (AppendFrame, DecodeFrame), moved as they are by a codec
// registered under the content-subtype weir-control-v1. A grpc.Server serving the
// Coordinator may therefore serve protobuf services (Arrow Flight) too; it should
// have ServerOptions, whose keepalive turns a vanished node into a lost stream.
//
// # The stream
//
// A node opens its stream with Connect: a Hello with its name, role, address and
// incarnation, and the highest term and generation it has seen. The coordinator
// refuses a Hello whose term or generation is above its own (the node has seen a newer
// leader or graph), whose incarnation the Registry (the meta store) refuses or is
// below the node's current stream's, and a second stream of the same incarnation; a
// newer incarnation replaces the node's stream, which ends with an error naming the
// newer incarnation. It answers with an Accept stamped with its term and the current
// generation.
//
// Every message carries a Stamp: the leader's term, the graph's generation and the
// node's incarnation. The coordinator refuses a node's message of a term or
// generation other than its own or of an incarnation other than the stream's; a node
// refuses one of a term or generation below the ones it has accepted or of an
// incarnation other than its own, and takes a higher term or generation as the known
// one. A refused message is dropped and counted (Refusals) and its RefusedError names
// the three numbers on both sides; the stream goes on.
//
// A request is named by an id that its answer carries: a BuildActors is answered by
// the Built of its id, a Call (the commit log's request for the node's part of a
// checkpoint, an opaque payload) by the Answer of its id, which holds the answer's
// payload or an error's text, never both. A node serves each Call on its own and
// answers it when it is done, so that the frames behind a Call (an upload may take
// seconds) are not held behind it: Answers may come in any order.
//
// The coordinator delivers each stream's events, in order, to one channel: NodeJoined,
// FromNode (Collected, Failed, Sealed, Built, Finishing, Answer), Refused, and
// NodeLost once the stream ends for any reason (the node's process died, its context
// ended, a newer incarnation, a frame that did not decode), so that a lost node is an
// event, never a hang.
//
// # Files
//
//   - frame.go: Kind, Stamp, the messages; AppendFrame and DecodeFrame.
//   - refuse.go: RefusedError and the stamp checks of both sides.
//   - codec.go: the codec, the hand-written service description, ServerOptions.
//   - coordinator.go: Coordinator, Config, Registry, the events.
//   - node.go: Connect and Node.
//   - host.go: Host and Serve: a compute process's side of its stream.
//   - local.go: Local, an engine.Control over these streams for the nodes of one
//     engine: every node's actors built from a BuildActors frame that its Built
//     frame answers, every barrier an Inject frame to the nodes of the sources,
//     every actor's report a Collected or Failed frame, every commit log's request
//     a Call frame that its Answer frame answers. A lost stream's report, and every
//     build, injection and call of the node that fails for the loss, wraps
//     engine.ErrNodeLost.
//   - localgraph.go: the control of one of a Local's graphs (its ControlGraph).
//   - localside.go: the side of a node in the engine's own process, a Host that
//     Serve runs.
//   - remote.go: a Local's remote nodes (NewCluster): compute processes, their
//     names and roles, the wait for their streams, the nodes left down.
package control
