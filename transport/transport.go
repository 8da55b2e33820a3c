package transport

import (
	"context"
	"unsafe"
)

// MaxHandleSize is the largest Handle a transport may produce, in bytes
// (NCCL's NCCL_NET_HANDLE_MAXSIZE), so that rendezvous entries stay small.
const MaxHandleSize = 128

// Handle is the opaque address of a Listener: bytes that a rank publishes
// through the rendezvous store and a peer passes to Connect on the same kind
// of transport. Its contents are private to the transport that made it; a
// transport that is given bytes it did not make returns ErrBadHandle.
type Handle []byte

// Info describes a transport's capabilities and limits.
type Info struct {
	// Name is the transport's short name ("tcp", "shm", or a plugin's),
	// used in errors and logs.
	Name string
	// EagerLimit is the largest message sent without waiting for the
	// receiver to post its receive; larger ones pay a round trip first.
	// A transport whose sends never wait for the receiver (a plugin's)
	// says math.MaxInt.
	EagerLimit int
	// MaxRequests is how many requests one connection accepts in flight
	// before Isend or Irecv returns ErrWouldBlock.
	MaxRequests int
	// ZeroCopy reports whether a message whose send buffer lies in a
	// registered Region is delivered without intermediate copies.
	ZeroCopy bool
}

// Transport creates connections of one kind. A Transport is one rank's end:
// two ranks that want to talk each have their own, of the same kind.
type Transport interface {
	// Info returns the transport's capabilities.
	Info() Info
	// Listen starts listening for one or more connections and returns the
	// Listener whose Handle peers pass to Connect.
	Listen(ctx context.Context) (Listener, error)
	// Connect opens a connection to the Listener whose Handle is h and
	// returns its send side. It returns an error wrapping ErrBadHandle
	// when h was not made by this kind of transport (or the listener
	// refuses it), and a *PeerError when the listener cannot be reached
	// before ctx ends.
	Connect(ctx context.Context, h Handle) (SendConn, error)
	// Close closes every Listener and connection the transport made and
	// releases its resources. Pending requests fail with ErrClosed. Close
	// is idempotent.
	Close() error
}

// Listener accepts the connections that peers open with its Handle.
type Listener interface {
	// Handle returns the bytes to publish; at most MaxHandleSize long.
	Handle() Handle
	// Accept waits for the next connection opened with the Handle and
	// returns its receive side, in the order the connections completed.
	// A peer that needs to know who connected uses one Listener per peer.
	Accept(ctx context.Context) (RecvConn, error)
	// Close stops listening; connections already accepted stay open.
	// Accept calls in progress return ErrClosed. Close is idempotent.
	Close() error
}

// Conn is what both sides of a connection have in common.
type Conn interface {
	// RegMR registers buf for use as a send or receive buffer on this
	// connection and returns the handle to pass with it. Transports that
	// need no registration return a handle that only records buf. A buf
	// inside a Region (see Alloc) may be shared with the peer so that
	// transfers from it need no intermediate copy; this may take a round
	// trip to the peer. The handle is valid on this connection only.
	RegMR(buf []byte) (MemHandle, error)
	// DeregMR releases a registration. It returns an error wrapping
	// ErrBadMemHandle when mh was not made by this connection, was
	// already released, or is still used by a request in flight.
	DeregMR(mh MemHandle) error
	// Peer names the other end (an address, a process) for errors and
	// logs.
	Peer() string
	// Close closes the connection. Its pending requests fail with
	// ErrClosed and the peer's with ErrPeerLost. Close is idempotent.
	Close() error
}

// SendConn is the send side of a connection, returned by Connect.
type SendConn interface {
	Conn
	// Isend starts sending buf with tag. mh is nil or a handle from
	// RegMR on this connection whose memory contains buf (ErrBadMemHandle
	// otherwise). The request is done when buf may be reused; its size is
	// len(buf). Isend returns ErrWouldBlock when Info().MaxRequests
	// requests are in flight, and the connection's error once it failed.
	Isend(buf []byte, tag uint64, mh MemHandle) (Request, error)
}

// RecvConn is the receive side of a connection, returned by Accept.
type RecvConn interface {
	Conn
	// Irecv starts receiving the next message sent with tag into buf. mh
	// is as for Isend. The request's size is the number of bytes
	// received; it fails with ErrTruncated when the message was longer
	// than buf (buf then holds its beginning).
	Irecv(buf []byte, tag uint64, mh MemHandle) (Request, error)
}

// Request is a transfer in flight, started by Isend or Irecv.
type Request interface {
	// Test reports without blocking whether the request is done, and if
	// so its size and error. The call that reports done consumes the
	// request; later calls return done with ErrRequestDone.
	Test() (done bool, n int, err error)
	// Wait blocks until the request is done and returns its size and
	// error, consuming it. If ctx ends first it returns ctx.Err() and the
	// request stays in flight (Wait or Test it again). Wait on a consumed
	// request returns ErrRequestDone.
	Wait(ctx context.Context) (n int, err error)
}

// MemHandle is a registration made by Conn.RegMR. It is opaque except for
// the memory it covers.
type MemHandle interface {
	// Bytes returns the registered memory.
	Bytes() []byte
}

// Contains reports whether buf lies inside mem. An empty buf lies inside
// any mem.
func Contains(mem, buf []byte) bool {
	if len(buf) == 0 {
		return true
	}
	if len(mem) == 0 {
		return false
	}
	m := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	b := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return b >= m && b+uintptr(len(buf)) <= m+uintptr(len(mem))
}

// WaitAll waits for every request and returns the first error in reqs'
// order (nil when all succeeded). If ctx ends it returns ctx.Err(); the
// requests not yet done stay in flight.
func WaitAll(ctx context.Context, reqs ...Request) error {
	var first error
	for _, r := range reqs {
		if _, err := r.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
}
