package control

import "fmt"

// RefusedError is a message refused for its stamp: a term below the one the receiver
// knows (or, at the coordinator, above the leader's own), a generation below the
// current one (or, at the coordinator, above it), or an incarnation other than the
// stream's. The stream goes on: the message is dropped and counted.
type RefusedError struct {
	// Node is the node of the stream.
	Node string
	// Kind is the refused message's kind.
	Kind Kind
	// Got is the refused message's stamp; Want what the receiver knows.
	Got, Want Stamp
	// Reason names the number that failed.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("control: node %q: refused %s stamped term %d, generation %d, incarnation %d: %s (the receiver knows term %d, generation %d, incarnation %d)",
		e.Node, e.Kind, e.Got.Term, e.Got.Generation, e.Got.Incarnation, e.Reason,
		e.Want.Term, e.Want.Generation, e.Want.Incarnation)
}

// checkAtCoordinator checks the stamp of a message from node against want, the
// leader's term and generation and the stream's incarnation: each must be equal.
func checkAtCoordinator(node string, k Kind, got, want Stamp) *RefusedError {
	var reason string
	switch {
	case got.Term < want.Term:
		reason = "stale term"
	case got.Term > want.Term:
		reason = "term above the leader's"
	case got.Generation < want.Generation:
		reason = "stale generation"
	case got.Generation > want.Generation:
		reason = "generation above the current one"
	case got.Incarnation != want.Incarnation:
		reason = "not the stream's incarnation"
	default:
		return nil
	}
	return &RefusedError{Node: node, Kind: k, Got: got, Want: want, Reason: reason}
}

// checkAtNode checks the stamp of a message from the coordinator against what the
// node knows: the term may be the known one or above (a re-elected leader), the
// generation, within the known term, the known one or above (a rebuilt graph; a new
// leader's generations start anew), and the incarnation must be the node's own.
func checkAtNode(node string, k Kind, got, known Stamp) *RefusedError {
	var reason string
	switch {
	case got.Term < known.Term:
		reason = "stale term"
	case got.Term == known.Term && got.Generation < known.Generation:
		reason = "stale generation"
	case got.Incarnation != known.Incarnation:
		reason = "not this node's incarnation"
	default:
		return nil
	}
	return &RefusedError{Node: node, Kind: k, Got: got, Want: known, Reason: reason}
}
