// Package remote serves an engine to programs in other processes over Arrow Flight,
// and is their client: one API for both modes (docs/design.md §8). A program written
// against engine.DB runs against the embedded engine (engine.Open) or a remote one
// (Dial) by changing only how it opens it.
//
// # The protocol
//
// Every request is a JSON object (see request) in a Flight message:
//
//   - DoAction of a type ListActions lists (weir.create_table.v1, create_mv, drop_mv,
//     reschedule_mv, pause_mv, resume_mv, set_rate_limit, pause, resume,
//     wait_checkpoint, progress, vnode_progress), the object its body; each answers
//     one Result once the engine's call returned (wait_checkpoint's body is
//     {"epoch": N}, progress's and vnode_progress's the engine's JSON of them), or
//     fails with the engine's error as the status message.
//   - DoPut: a write. The descriptor is a command naming the table and the operation
//     (insert, upsert, update, delete); each record of the stream is one write, and
//     the server acknowledges it with a PutResult once the engine's write returned
//     nil. The client sends one record per DoPut and returns only on its
//     acknowledgement, so that a write that returns nil is in the remote engine's
//     next checkpoint.
//   - DoGet: a Scan. The ticket names the table or view; the stream is its rows at
//     the committed epoch, as the engine's Scan reads them.
//
// Statuses carry engine.ErrClosed (Aborted), engine.ErrReadOnly (PermissionDenied),
// context.Canceled and
// context.DeadlineExceeded back to the client, where errors.Is finds them; a server
// that does not answer is ErrUnavailable, and a write that fails so may or may not
// have been taken.
//
// Not built yet: TLS and authentication (serve on loopback or a private network).
//
// # Files
//
//   - protocol.go: the requests and their decoding.
//   - server.go: Server, NewFlightServer.
//   - client.go: Dial and Client.
package remote
