package collectives

import "context"

// P2P is the point-to-point messaging a [Communicator] runs its algorithms
// over: one endpoint per rank of a job, which can send tagged messages to
// any other rank's endpoint. It is the seam between this package and the
// transports: [Init] provides one made from package transport's
// connections; package collectivestest provides one over memory for tests.
//
// Ranks are numbered 0..size-1, as in the Communicator built over the
// endpoint with [New]. Implementations must keep these rules:
//
//   - Matching. A message sent by rank a to rank b with tag t is received by
//     a receive that b posts for peer a and tag t. Messages of one pair and
//     tag match receives in the order both were posted (no overtaking);
//     messages with other tags do not delay them.
//   - Gather and scatter. A message is the concatenation of the buffers
//     given to Isend; a receive fills its buffers in order. A receive whose
//     buffers are larger than the message completes with the message's
//     length; one whose buffers are smaller receives what fits and fails
//     with an error that wraps [ErrTruncated] (and reports the full length).
//   - Ownership. The buffers belong to the implementation until the request
//     completes: the caller does not write them (Isend) or touch them
//     (Irecv) before Wait returns.
//   - Progress. A posted receive never prevents a matching send from
//     completing. Messages of at most [EagerBytes] bytes complete their
//     send without waiting for the receiver; larger ones may wait for it.
//   - Cancellation. When ctx ends before a request completes, the request is
//     withdrawn promptly and fails with context.Cause(ctx); its buffers are
//     not touched afterwards.
//   - Failures. A request whose peer died, closed its endpoint or lost its
//     connection fails, promptly, with an error that wraps [ErrPeerGone].
//     That includes receives posted after the peer was lost, once the
//     messages it sent before are consumed.
//
// All methods are safe for concurrent use.
type P2P interface {
	// Isend starts sending the concatenation of bufs to peer with tag.
	Isend(ctx context.Context, peer int, tag uint64, bufs ...[]byte) Transfer
	// Irecv starts receiving a message from peer with tag into bufs.
	Irecv(ctx context.Context, peer int, tag uint64, bufs ...[]byte) Transfer
	// Host returns the host of a rank, as a small integer: ranks on the
	// same host (which reach each other through shared memory) return the
	// same value. The hierarchical algorithms and the choice of link class
	// use it.
	Host(rank int) int
}

// Transfer is a send or receive started by [P2P.Isend] or [P2P.Irecv].
type Transfer interface {
	// Wait blocks until the operation completes and returns the length of
	// the message (for a send, the bytes sent) and its error. It returns
	// at the latest shortly after the context given when the operation
	// started ends. It may be called more than once.
	Wait() (n int, err error)
}

// EagerBytes is the size up to which a [P2P] must complete a send without
// waiting for the receiver. The Communicator's own control messages (aborts
// and departures) are smaller.
const EagerBytes = 256
