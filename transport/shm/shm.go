//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/closers"
	"github.com/gorun/gorun/internal/connbase"
	"github.com/gorun/gorun/transport"
)

// Defaults for the zero Options.
const (
	DefaultRingSize    = 1 << 20
	DefaultEagerLimit  = 64 << 10
	DefaultMaxRequests = 1024
	DefaultSpin        = 20 * time.Microsecond

	// eagerWindow bounds the bytes (plus a per-message overhead) of eager
	// messages a receiver holds before their receives are posted.
	eagerWindow   = 4 << 20
	eagerOverhead = 64
	// streamChunk is the most of a large message the sender copies into
	// the ring per record (less when a quarter ring is less), pipelined
	// with the receiver copying the records out. Measured with 2 ranks
	// bound to the 2 cores of a Xeon VM (2 MiB L2 each), 16 MiB sendrecv:
	// 64 KiB chunks in the 1 MiB ring 5.6 GB/s against 4.9 for a quarter
	// ring (256 KiB), 16 and 32 KiB 5.0 and 5.2; 256 KiB messages 3.5
	// against 3.0; allreduce level to 10% ahead; 4 ranks on the 2 cores
	// level. Smaller chunks keep the data that one side writes in the
	// other's reach while it is still in cache.
	streamChunk = 64 << 10
	// zcopyStep is the most a zero-copy receive copies per poll, so that
	// other work on the connection is not held up for long.
	zcopyStep = 4 << 20
	// setupTimeout bounds a connection's handshake and RegMR's round trip.
	setupTimeout = 10 * time.Second
)

// Options configure a Transport. The zero value is usable.
type Options struct {
	// RingSize is the size of each connection's data ring in bytes, a
	// power of two from 64 KiB to 1 GiB (0 means DefaultRingSize). The
	// connecting side's value is used. Memory is committed as the ring
	// is used.
	RingSize int
	// EagerLimit is the largest message copied into the ring without
	// waiting for its receive (0 means DefaultEagerLimit; at most a
	// quarter of the ring).
	EagerLimit int
	// MaxRequests is the number of requests a connection accepts in
	// flight (0 means DefaultMaxRequests).
	MaxRequests int
	// CMA has the receiver of a message above EagerLimit that is not in
	// a Region read it straight from the sender's memory
	// (process_vm_readv, as Open MPI's vader does with CMA): one copy, by
	// the receiver, instead of two through the ring, by both sides in
	// parallel. Where the kernel refuses the read, the message goes
	// through the ring. Off by default: on 2 ranks of a 2-vCPU VM it was
	// slower than the ring (5.9 against 8.2 GB/s busbw for a 256 KiB
	// AllReduce, 3.4-3.9 against 4.9-5.2 at 64 MiB); with 4 ranks on 2
	// vCPUs it was faster at 256 KiB-1 MiB only.
	CMA bool
	// Spin is how long Wait keeps polling after the last progress before
	// it sleeps (0 means DefaultSpin; negative means never spin). Spinning
	// costs a CPU; sleeping costs a wake-up (about 10 µs).
	Spin time.Duration
}

// Transport is the shared-memory transport. Create it with New.
type Transport struct {
	opts Options

	conns closers.Set // listeners and connections, closed by Close
}

var _ transport.Transport = (*Transport)(nil)

// New returns a shared-memory transport.
func New(opts Options) (*Transport, error) {
	if opts.RingSize == 0 {
		opts.RingSize = DefaultRingSize
	}
	if r := opts.RingSize; r < minRingSize || r > maxRingSize || r&(r-1) != 0 {
		return nil, fmt.Errorf("shm: ring of %d bytes: must be a power of two from %d to %d", r, minRingSize, maxRingSize)
	}
	if opts.EagerLimit <= 0 {
		opts.EagerLimit = DefaultEagerLimit
	}
	opts.EagerLimit = min(opts.EagerLimit, opts.RingSize/4-recHdr)
	if opts.MaxRequests <= 0 {
		opts.MaxRequests = DefaultMaxRequests
	}
	if opts.Spin == 0 {
		opts.Spin = DefaultSpin
	}
	return &Transport{opts: opts}, nil
}

// Info implements transport.Transport.
func (t *Transport) Info() transport.Info {
	return transport.Info{Name: "shm", EagerLimit: t.opts.EagerLimit, MaxRequests: t.opts.MaxRequests, ZeroCopy: true}
}

// Close implements transport.Transport.
func (t *Transport) Close() error {
	t.conns.CloseAll()
	return nil
}

// A handle is 's', version, the boot id (16 bytes), the socket name's
// length and the name (abstract, without its '@'), the nonce (16 bytes).
const handleVersion = 1

type handle struct {
	boot  [16]byte
	nonce [16]byte
	name  string
}

func (h handle) marshal() transport.Handle {
	b := []byte{'s', handleVersion}
	b = append(b, h.boot[:]...)
	b = append(b, byte(len(h.name)))
	b = append(b, h.name...)
	return append(b, h.nonce[:]...)
}

func parseHandle(b []byte) (handle, error) {
	var h handle
	if len(b) < 2 || b[0] != 's' {
		return h, fmt.Errorf("shm: %w: not a shm handle (%d bytes)", transport.ErrBadHandle, len(b))
	}
	if b[1] != handleVersion {
		return h, fmt.Errorf("shm: %w: version %d, this gorun speaks %d", transport.ErrBadHandle, b[1], handleVersion)
	}
	if len(b) < 19+16 || b[18] == 0 || len(b) != 19+int(b[18])+16 {
		return h, fmt.Errorf("shm: %w: malformed (%d bytes)", transport.ErrBadHandle, len(b))
	}
	copy(h.boot[:], b[2:18])
	n := int(b[18])
	h.name = string(b[19 : 19+n])
	copy(h.nonce[:], b[19+n:])
	return h, nil
}

// The setup messages on the socket, 40 bytes each: magic, type, status,
// two numbers, a nonce.
const (
	msgSize    = 40
	msgMagic   = "GSH1"
	msgHello   = 'H' // a=ring size, nonce; rights: segment, sender's eventfd
	msgWelcome = 'W' // status; rights: receiver's eventfd
	msgReg     = 'R' // a=region id, b=size; rights: the region's memfd
	msgRegAck  = 'A' // a=region id, status
	msgDereg   = 'D' // a=region id
	statusOK   = 'K'
	statusNo   = 'N'
)

type sockMsg struct {
	typ, status byte
	a, b        uint64
	nonce       [16]byte
}

func (m sockMsg) marshal() []byte {
	b := make([]byte, 0, msgSize)
	b = append(b, msgMagic...)
	b = append(b, m.typ, m.status, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, m.a)
	b = binary.LittleEndian.AppendUint64(b, m.b)
	return append(b, m.nonce[:]...)
}

func parseMsg(b []byte) (sockMsg, error) {
	var m sockMsg
	if len(b) != msgSize || string(b[:4]) != msgMagic {
		return m, fmt.Errorf("%w: bad setup message (%d bytes)", transport.ErrProtocol, len(b))
	}
	m.typ, m.status = b[4], b[5]
	m.a = binary.LittleEndian.Uint64(b[8:])
	m.b = binary.LittleEndian.Uint64(b[16:])
	copy(m.nonce[:], b[24:40])
	return m, nil
}

// readMsg reads one setup message and the descriptors that came with it.
func readMsg(c *net.UnixConn) (sockMsg, []int, error) {
	b := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return sockMsg{}, nil, err
	}
	if n == 0 {
		return sockMsg{}, nil, io.EOF
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, cm := range cmsgs {
				if f, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFDs(fds)
		return sockMsg{}, nil, fmt.Errorf("%w: truncated setup message", transport.ErrProtocol)
	}
	m, err := parseMsg(b[:n])
	if err != nil {
		closeFDs(fds)
		return m, nil, err
	}
	return m, fds, nil
}

func writeMsg(c *net.UnixConn, b []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	return err
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// peerPID returns the pid of the process at the other end of c, as the
// kernel knows it.
func peerPID(c *net.UnixConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// Listen implements transport.Transport.
func (t *Transport) Listen(ctx context.Context) (transport.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rnd [28]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("shm: listen: %w", err)
	}
	h := handle{boot: bootID(), name: "gorun-shm-" + hex.EncodeToString(rnd[16:])}
	copy(h.nonce[:], rnd[:16])
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + h.name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen: %w", err)
	}
	l := &listener{t: t, h: h, handle: h.marshal()}
	l.Listener = connbase.NewListener(ln, "shm", h.name, &t.conns, l.handshake)
	if err := t.conns.Add(l); err != nil {
		ln.Close()
		return nil, err
	}
	l.Start()
	return l, nil
}

// listener is a listening socket: connbase.Listener around the handshake
// of shm's connections.
type listener struct {
	*connbase.Listener[*net.UnixConn]
	t      *Transport
	h      handle
	handle transport.Handle
}

// Handle implements transport.Listener.
func (l *listener) Handle() transport.Handle { return append(transport.Handle(nil), l.handle...) }

// handshake takes a connector's hello, maps its segment and answers with
// this side's doorbell.
func (l *listener) handshake(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(setupTimeout))
	m, fds, err := readMsg(c)
	if open := l.Heard(c); err != nil || !open {
		closeFDs(fds)
		c.Close()
		return
	}
	refuse := func() {
		closeFDs(fds)
		writeMsg(c, sockMsg{typ: msgWelcome, status: statusNo}.marshal())
		c.Close()
	}
	if m.typ != msgHello || m.nonce != l.h.nonce || len(fds) != 2 {
		refuse()
		return
	}
	seg, err := mapSegment(fds[0], int(m.a))
	if err != nil {
		refuse()
		return
	}
	unix.Close(fds[0])
	bell, bellFD, err := newDoorbell()
	if err != nil {
		seg.unmap()
		unix.Close(fds[1])
		c.Close()
		return
	}
	if err := writeMsg(c, sockMsg{typ: msgWelcome, status: statusOK}.marshal(), bellFD); err != nil {
		seg.unmap()
		unix.Close(fds[1])
		bell.close()
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	l.Deliver(newRecvConn(l.t, c, seg, bell, fds[1]))
}

// Close implements transport.Listener.
func (l *listener) Close() error {
	l.Listener.Close()
	l.t.conns.Remove(l)
	return nil
}

// Connect implements transport.Transport.
func (t *Transport) Connect(ctx context.Context, hb transport.Handle) (transport.SendConn, error) {
	h, err := parseHandle(hb)
	if err != nil {
		return nil, err
	}
	if h.boot != bootID() && h.boot != ([16]byte{}) && bootID() != ([16]byte{}) {
		return nil, fmt.Errorf("shm: %w: made on another host (boot id %x, this host's %x)", transport.ErrBadHandle, h.boot, bootID())
	}
	peer := "@" + h.name
	peerErr := func(err error) error {
		return &transport.PeerError{Transport: "shm", Op: "connect", Peer: peer, Err: err}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", peer)
	if err != nil {
		return nil, peerErr(err)
	}
	c := nc.(*net.UnixConn)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(setupTimeout)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()

	seg, segFD, err := newSegment(t.opts.RingSize)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("shm: connect: %w", err)
	}
	bell, bellFD, err := newDoorbell()
	if err != nil {
		seg.unmap()
		unix.Close(segFD)
		c.Close()
		return nil, fmt.Errorf("shm: connect: %w", err)
	}
	fail := func(err error) (transport.SendConn, error) {
		seg.unmap()
		bell.close()
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, peerErr(err)
	}
	err = writeMsg(c, sockMsg{typ: msgHello, a: uint64(t.opts.RingSize), nonce: h.nonce}.marshal(), segFD, bellFD)
	unix.Close(segFD)
	if err != nil {
		return fail(err)
	}
	m, fds, err := readMsg(c)
	switch {
	case errors.Is(err, io.EOF):
		return fail(fmt.Errorf("%w: the listener closed the connection during the handshake", transport.ErrBadHandle))
	case err != nil:
		return fail(err)
	case m.typ != msgWelcome || m.status != statusOK || len(fds) != 1:
		closeFDs(fds)
		return fail(fmt.Errorf("%w: the listener refused it", transport.ErrBadHandle))
	}
	if !stop() {
		unix.Close(fds[0])
		return fail(ctx.Err())
	}
	c.SetDeadline(time.Time{})
	sc := newSendConn(t, c, seg, bell, fds[0])
	sc.Start()
	if err := t.conns.Add(sc); err != nil {
		sc.Close()
		return nil, fmt.Errorf("shm: connect: %w", err)
	}
	return sc, nil
}
