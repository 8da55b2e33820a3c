// Package ofi is a small cgo binding of libfabric (OFI) for reliable-datagram
// (FI_EP_RDM) tagged messaging: the foundation of a gorun transport plugin for
// InfiniBand (verbs;ofi_rxm), RoCE, AWS EFA (efa), and, for tests and
// single-host runs, TCP (tcp;ofi_rxm) and shared memory (shm).
//
// # Model
//
// [Open] creates one fabric, domain, RDM endpoint, tagged completion queue
// and table address vector for a provider. Peers exchange the opaque
// [Endpoint.Name] out of band (gorun's rendezvous), [Endpoint.Insert] each
// other's names, and then post tagged sends and receives. Tags match exactly
// (the ignore mask is 0). Posting returns a [Request]; completions are reaped
// by [Endpoint.Progress], which [Request.Test] and [Request.Wait] call. The
// providers this package targets use manual data progress: nothing moves
// unless some goroutine calls Progress (directly or through Test/Wait) on
// each endpoint involved, including the sending one. Send and Recv never
// block: when the provider has no room for an operation (-FI_EAGAIN; with
// tcp;ofi_rxm, for instance, until the peer has accepted the connection,
// which takes the peer's progress) it is queued in order and posted by a
// later Progress.
//
// # Memory
//
// cgo forbids C code to keep a Go pointer after a call returns, and a
// libfabric provider keeps the buffer (and the operation context) of a send
// or receive until the operation completes. This package therefore never
// hands Go memory to libfabric:
//
//   - every Request's operation context is a C-allocated struct fi_context2,
//     mapped back to its Request through a map keyed by the C address;
//   - Send copies the caller's buffer into C memory (a malloc'ed bounce
//     buffer, or the staging copy of an [MR]) before fi_tsend, so the caller
//     may reuse its buffer as soon as Send returns;
//   - Recv receives into C memory and copies into the caller's buffer when
//     the receive completes, so the caller must not touch that buffer until
//     the Request is done.
//
// All C memory of a Request is freed when it completes, or by
// [Endpoint.Close]. The copies cost bandwidth for large messages. The
// zero-copy path is [Endpoint.RegisterExternal]: memory outside the Go heap
// (mmapped from a memfd, C-allocated) registered once; sends and receives of
// buffers inside it are posted on the buffers themselves, with the MR's
// descriptor when the provider needs FI_MR_LOCAL.
//
// Providers that need local memory registration (FI_MR_LOCAL in the
// domain's mr_mode, e.g. some verbs and EFA setups) get it: [Endpoint.Register]
// then allocates a registered C staging region mirroring the caller's buffer,
// and Send/Recv on that buffer (or any sub-slice of it) use it without a
// per-message allocation or registration; without an MR, such providers get
// a per-message registration of the bounce buffer. On providers without
// FI_MR_LOCAL, Register returns a no-op MR.
//
// # Concurrency
//
// An Endpoint is safe for concurrent use. It requests FI_THREAD_DOMAIN (not
// every provider offers FI_THREAD_SAFE) and serializes every libfabric call
// on the endpoint with one mutex.
//
// # Known provider issues (libfabric 1.17, Debian 12)
//
//   - tcp;ofi_rxm: after a receive truncates an eager message (up to
//     FI_OFI_RXM_EAGER_LIMIT, 16 KiB), the rest of it stays on the
//     connection and later traffic between the two endpoints hangs
//     (ofiwg/libfabric issue 8274, fixed in later releases). Larger
//     (rendezvous) messages truncate cleanly.
//   - shm: truncating a message larger than its inject size (4 KiB) makes
//     fi_cq_read spin forever inside the provider, holding the endpoint.
//     shm also reports completion errors as negative codes, which this
//     package normalizes.
//
// A transport built on this package should therefore size its receives
// so that they never truncate (e.g. announce lengths in a header message).
//
// # Builds
//
// The cgo implementation needs libfabric's headers and library (Debian:
// apt-get install libfabric-dev; fi_info comes with libfabric-bin). Without
// cgo, or off Linux, the same API is compiled but returns [ErrUnavailable],
// so that CGO_ENABLED=0 builds of gorun keep working.
//
// The tcp provider binds to the interface named by FI_TCP_IFACE; set it
// (e.g. FI_TCP_IFACE=lo) before the first call into this package to keep
// traffic on one interface.
package ofi
