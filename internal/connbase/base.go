package connbase

import (
	"github.com/gorun/gorun/internal/memreg"
	"github.com/gorun/gorun/transport"
)

// Base is what every connection of a built-in transport has: the name of
// its transport and its peer, which its errors name, and the memory
// registrations made on it. Embedded in a connection, it gives it Peer,
// RegMR and DeregMR; a registration belongs to the Base, which CheckMR and
// ReleaseMR check it against.
type Base struct {
	Transport string // the transport's name, which errors start with ("tcp", "shm")
	PeerName  string // what Peer returns
}

// Peer implements transport.Conn.
func (b *Base) Peer() string { return b.PeerName }

// OpErr is the error of operation op on the connection, for err.
func (b *Base) OpErr(op string, err error) error {
	return &transport.PeerError{Transport: b.Transport, Op: op, Peer: b.PeerName, Err: err}
}

// NewMR returns a registration of buf on the connection.
func (b *Base) NewMR(buf []byte) *memreg.Handle { return &memreg.Handle{Owner: b, Buf: buf} }

// RegMR implements transport.Conn: the registration of buf, which needs
// nothing more than the memory.
func (b *Base) RegMR(buf []byte) (transport.MemHandle, error) { return b.NewMR(buf), nil }

// DeregMR implements transport.Conn.
func (b *Base) DeregMR(mh transport.MemHandle) error {
	_, err := b.ReleaseMR(mh)
	return err
}

// CheckMR returns mh as a registration of the connection that covers buf,
// or nil for a nil mh (memreg.Check).
func (b *Base) CheckMR(mh transport.MemHandle, buf []byte) (*memreg.Handle, error) {
	return memreg.Check(b.Transport, b, mh, buf)
}

// ReleaseMR marks mh, a registration of the connection that no request
// uses, released, and returns it (memreg.Release).
func (b *Base) ReleaseMR(mh transport.MemHandle) (*memreg.Handle, error) {
	return memreg.Release(b.Transport, b, mh)
}
