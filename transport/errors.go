package transport

import "errors"

// Sentinel errors. Transports wrap them, so test with errors.Is.
var (
	// ErrClosed is returned for operations on, and requests of, a
	// Transport, Listener or connection that this side closed.
	ErrClosed = errors.New("transport: closed")
	// ErrPeerLost means the peer closed its side or its process or host
	// went away; the connection cannot be used any more.
	ErrPeerLost = errors.New("transport: peer lost")
	// ErrWouldBlock is returned by Isend and Irecv when the connection
	// already has Info().MaxRequests requests in flight. Complete some
	// and retry.
	ErrWouldBlock = errors.New("transport: too many requests in flight")
	// ErrBadHandle is returned by Connect for bytes that are not a handle
	// of this transport, or that the listener refuses.
	ErrBadHandle = errors.New("transport: bad handle")
	// ErrBadMemHandle is returned for a memory handle that this connection
	// did not make, that was released, that does not contain the buffer,
	// or (by DeregMR) that requests in flight still use.
	ErrBadMemHandle = errors.New("transport: bad memory handle")
	// ErrTruncated completes a receive whose message was longer than its
	// buffer.
	ErrTruncated = errors.New("transport: message longer than receive buffer")
	// ErrRequestDone is returned by Test and Wait on a request that a
	// previous call already reported done.
	ErrRequestDone = errors.New("transport: request already completed")
	// ErrProtocol means the peer sent something that the transport's wire
	// protocol does not allow (a version mismatch or a corrupt message).
	ErrProtocol = errors.New("transport: protocol error")
	// ErrNotSupported is returned for an operation that this transport or
	// platform does not provide.
	ErrNotSupported = errors.New("transport: not supported")
)

// ErrTransportLost means the transport itself failed (a plugin process
// exited): every connection it carried is gone. errors.Is reports it as
// ErrPeerLost too, so that code handling a lost peer handles it.
var ErrTransportLost error = transportLost{}

type transportLost struct{}

func (transportLost) Error() string        { return "transport: transport lost" }
func (transportLost) Is(target error) bool { return target == ErrPeerLost }

// PeerError is an error about one peer: what failed, where, and why.
type PeerError struct {
	// Transport is the transport's Info().Name.
	Transport string
	// Op is the operation: "connect", "accept", "isend", "irecv", "regmr".
	Op string
	// Peer names the other end, as Conn.Peer does.
	Peer string
	// Err is the cause; it wraps ErrPeerLost, ErrClosed, ErrProtocol or a
	// system error.
	Err error
}

// Error returns "<transport> <op>, peer <peer>: <cause>".
func (e *PeerError) Error() string {
	return e.Transport + " " + e.Op + ", peer " + e.Peer + ": " + e.Err.Error()
}

// Unwrap returns e.Err.
func (e *PeerError) Unwrap() error { return e.Err }
