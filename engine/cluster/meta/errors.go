package meta

import "errors"

// The errors of the store. Each call wraps them with what it concerns (holder and
// term, node and incarnation, epoch and sequence), so test them with errors.Is.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("store closed")
	// ErrLeaseHeld is returned by AcquireLeader while another holder's lease is
	// unexpired.
	ErrLeaseHeld = errors.New("leader lease held")
	// ErrDeposed is returned by Renew, Release and Commit when the lease's term is no
	// longer the leader's: another holder (or the same one, again) acquired the lease
	// since. A deposed leader steps down and does not retry.
	ErrDeposed = errors.New("leader deposed")
	// ErrEpochCommitted is returned by Commit when the checkpoint's epoch is not above
	// the committed epoch.
	ErrEpochCommitted = errors.New("epoch already committed")
	// ErrStaleGeneration is returned by Commit when the checkpoint's generation is
	// below the committed generation.
	ErrStaleGeneration = errors.New("stale generation")
	// ErrConflict is returned by Commit when the committed sequence is no longer the
	// one the checkpoint read.
	ErrConflict = errors.New("sequence moved")
	// ErrOutcomeUnknown is returned by Commit when the transaction's COMMIT was sent
	// but its answer was lost: the checkpoint may or may not be committed, and
	// Committed tells which.
	ErrOutcomeUnknown = errors.New("commit outcome unknown")
	// ErrUnknownNode is returned by CheckIncarnation for a node never registered.
	ErrUnknownNode = errors.New("unknown node")
	// ErrStaleIncarnation is returned by CheckIncarnation for an incarnation that is
	// not the node's current one.
	ErrStaleIncarnation = errors.New("stale incarnation")
)
