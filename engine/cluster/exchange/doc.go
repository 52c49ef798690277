// Package exchange carries one edge of a cluster's graph, an upstream actor's messages
// to a downstream actor in another process, over an Arrow Flight DoExchange stream
// (docs/design.md §8), in package wire's encoding.
//
// The receiving process runs a Server (NewFlightServer serves it) and registers each
// edge it expects with Expect, which returns the edge's Inbox: a bounded channel of
// decoded messages and, once it closes, how the stream ended. The sending process
// opens a Sender per edge on a Flight client (Dial) and calls Send for each message
// and Close at the end.
//
// # The stream
//
// The sender's first Flight message carries only the descriptor naming the edge (up,
// down, generation; see Edge); the server answers with an Ack of epoch 0 once the
// edge is accepted. Then each message is one Flight message: a chunk is its Arrow IPC
// record with package wire's chunk metadata (the first chunk is preceded by the IPC
// schema message), a barrier or watermark is app metadata alone, and End closes the
// stream. The server acknowledges each barrier after its inbox has taken it, and a
// barrier's Send returns only then.
//
// # Backpressure and failure
//
// The server reads the next Flight message only once the inbox has taken the last
// one, so a full inbox stops the stream and HTTP/2 flow control stops the sender's
// Send. With a fixed window (NewFlightServer's window), a sender runs at most about
// capacity + 1 + (window + grpc's 64 KiB write quota) / message size messages ahead
// of an unread inbox: TestBackpressure measured 18 with chunks of 1024 int64 rows, a
// 64 KiB window and an inbox of 4. A stream that ends without End (the sender died or
// was cancelled) closes the inbox with an error naming the edge; a receiver that goes
// away fails the sender's next barrier, and every Send after, naming the edge.
//
// # The engine's exchange
//
// Mesh is an engine.Exchange (engine.Options.Exchange) for the nodes of one process:
// a Server per node on its own loopback port, and for every edge the engine opens
// between two nodes, an Expect on the receiving node's server and a Sender into it.
// The engine's merge reads the Inbox; an inbox closed with an error fails it.
//
// The engine opens each side of an edge on its own node, in either order, as separate
// processes would (Open opens both at once, for tests): OpenRecv expects the edge on
// the receiving node's server (the inbox ends with an error if its context ends
// before a sender came), and OpenSend returns an Output whose first Send, or Close,
// opens the stream, retrying with a short backoff while the receiving server does not
// expect the edge yet.
//
// PeerMesh is the same exchange for a process that serves one node of a cluster whose
// other nodes run in other processes: it serves that node's Server, opens only the
// node's own sides of edges, and finds the other nodes' servers through a lookup (the
// cluster's node registry), at the first stream into each node and again after a
// connection into it failed, so that a node whose process restarted at another
// address is found there.
//
// # Files
//
//   - edge.go: Edge and its Flight descriptor.
//   - server.go: Server, Inbox, NewFlightServer; the DoExchange loop.
//   - sender.go: Dial and Sender.
//   - sides.go: the two sides of an edge, as Mesh and PeerMesh open them, and the
//     connections into a node's server.
//   - mesh.go: Mesh.
//   - peers.go: PeerMesh.
package exchange
