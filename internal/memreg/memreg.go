// Package memreg holds the memory registrations of the built-in
// transports: the handle RegMR returns, and the checks of Isend, Irecv and
// DeregMR.
package memreg

import (
	"fmt"
	"sync/atomic"

	"github.com/gorun/gorun/transport"
)

// Handle is a registration on one connection.
type Handle struct {
	Owner  any               // the connection that made it
	Buf    []byte            // the registered memory
	Region *transport.Region // shm's send side: the Region Buf lies in, passed to the peer; else nil
	Off    int               // Buf's offset in Region
	Uses   atomic.Int64      // requests in flight that use it

	released atomic.Bool
}

// Bytes implements transport.MemHandle.
func (m *Handle) Bytes() []byte { return m.Buf }

// Check returns mh as a Handle of owner that covers buf, or nil for a nil
// mh; name ("tcp", "shm") starts its errors.
func Check(name string, owner any, mh transport.MemHandle, buf []byte) (*Handle, error) {
	if mh == nil {
		return nil, nil
	}
	m, ok := mh.(*Handle)
	switch {
	case !ok || m.Owner != owner:
		return nil, fmt.Errorf("%s: %w: not registered on this connection", name, transport.ErrBadMemHandle)
	case m.released.Load():
		return nil, fmt.Errorf("%s: %w: released", name, transport.ErrBadMemHandle)
	case !transport.Contains(m.Buf, buf):
		return nil, fmt.Errorf("%s: %w: buffer outside the registered memory", name, transport.ErrBadMemHandle)
	}
	return m, nil
}

// Release marks mh, a Handle of owner that no request uses, released.
func Release(name string, owner any, mh transport.MemHandle) (*Handle, error) {
	m, ok := mh.(*Handle)
	if !ok || m.Owner != owner {
		return nil, fmt.Errorf("%s: deregmr: %w: not registered on this connection", name, transport.ErrBadMemHandle)
	}
	if n := m.Uses.Load(); n > 0 {
		return nil, fmt.Errorf("%s: deregmr: %w: %d requests in flight use it", name, transport.ErrBadMemHandle, n)
	}
	if !m.released.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%s: deregmr: %w: already released", name, transport.ErrBadMemHandle)
	}
	return m, nil
}

// Truncated is the error of a size-byte message received into an n-byte
// buffer, or nil when it fitted.
func Truncated(name string, size, n int) error {
	if size <= n {
		return nil
	}
	return fmt.Errorf("%s: %w: %d-byte message, %d-byte buffer", name, transport.ErrTruncated, size, n)
}
