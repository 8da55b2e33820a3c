// Package transport moves bytes between two ranks: the interface every
// gorun transport implements, built in (package tcp across hosts, package
// shm inside a host) or a plugin, and the shared types the collectives use.
//
// The shape follows NCCL's net plugin API (ncclNet), with Go idioms:
//
//   - One side calls [Transport.Listen] and publishes the [Listener]'s
//     [Handle] (opaque bytes, at most [MaxHandleSize]) through the
//     rendezvous store. The peer reads it and calls [Transport.Connect],
//     which returns the send side of a one-way connection ([SendConn]);
//     [Listener.Accept] returns its receive side ([RecvConn]). Two ranks that
//     talk both ways make two connections, one each way.
//   - Memory is registered per connection with [Conn.RegMR]. Registration is
//     optional for ordinary Go memory; it is what lets a transport move a
//     buffer without intermediate copies when the buffer lies in a [Region]
//     (memfd-backed memory from [Alloc]), and what a transport that talks to
//     a NIC or a plugin process needs.
//   - [SendConn.Isend] and [RecvConn.Irecv] start a transfer and return at
//     once with a [Request]; [Request.Test] polls it, [Request.Wait] blocks
//     until it is done or a context ends.
//
// # Semantics every transport keeps
//
// Messages carry a tag (a uint64 chosen by the caller). On one connection,
// the messages sent with one tag are received by the receives posted with
// that tag in the order both were issued; messages with different tags do
// not overtake each other's matching but may complete in any order. A
// receive buffer smaller than the message completes with [ErrTruncated]
// (the first len(buf) bytes are delivered). A message may arrive before its
// receive is posted: transports hold a bounded number of bytes of such
// messages and let the rest wait at the sender, so memory stays bounded
// and no order of posting can deadlock a transfer whose receive is posted.
//
// A buffer passed to Isend or Irecv belongs to the transport until its
// request is done: the caller must not write it (Isend) or read or write it
// (Irecv) before. Requests are done exactly once: the Test call that reports
// done, or the Wait call that returns a result, consumes the request, and any
// later Test or Wait returns [ErrRequestDone].
//
// Every method is safe for concurrent use. A transport never blocks in
// Isend or Irecv: when a connection already has Info().MaxRequests requests
// in flight it returns [ErrWouldBlock].
//
// # Failures
//
// Errors about a peer are [*PeerError] values that name the transport, the
// operation and the peer, and wrap a sentinel: [ErrPeerLost] when the peer
// closed its side or its process died, [ErrClosed] when this side was
// closed. When a peer dies, every pending request of the connections to it
// fails within a bounded time (at once when the kernel tells, as it does for
// a process on the same host or a closed TCP connection; within the
// transport's keepalive timeout when a host vanishes) — nothing hangs. A
// peer that is alive but stops making calls is not a failure: its requests
// wait, as NCCL's do.
//
// # What the package does not do
//
// It holds the rule that picks the kind of transport a pair of ranks talks
// over ([Mode.Pick]), but not the facts the rule needs: the caller learns
// which ranks share a host and which have a plugin transport. It does not
// exchange handles (the rendezvous package does), and does not reduce or
// gather anything (the collectives package does).
// Package transporttest holds the contract tests every transport must pass.
package transport
