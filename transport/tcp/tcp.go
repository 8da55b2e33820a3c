package tcp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/closers"
	"github.com/gorun/gorun/internal/connbase"
	"github.com/gorun/gorun/transport"
)

// Defaults for the zero Options.
const (
	DefaultStreams     = 2
	DefaultEagerLimit  = 64 << 10
	DefaultMaxRequests = 1024
	DefaultPeerTimeout = 20 * time.Second
	DefaultSpin        = 50 * time.Microsecond

	// MaxStreams is the most streams one connection may use.
	MaxStreams = 16

	// eagerWindow bounds the bytes of eager messages (plus a per-message
	// overhead) a receiver holds before their receives are posted.
	eagerWindow   = 4 << 20
	eagerOverhead = 64
	// minPart is the smallest part a striped message is cut into: smaller
	// messages go on one stream, a different one for each message.
	// Measured on loopback (2 vCPUs): striping 1 MiB in two parts is
	// slower than not striping it; 2 streams move 1.3x (1 MiB) to 1.7x
	// (64 MiB) the bytes of 1, and 4 streams no more than 2.
	minPart = 1 << 20
	// handshakeTimeout bounds how long a listener waits for a connection's
	// hellos and how long Connect waits for the answer when ctx has no
	// deadline.
	handshakeTimeout = 10 * time.Second
	// linger bounds how long Close waits for the peer to see the end.
	linger = 2 * time.Second
)

// Options configure a Transport. The zero value is usable.
type Options struct {
	// Iface chooses the network interface to listen on, in
	// NCCL_SOCKET_IFNAME syntax: a comma-separated list of name prefixes
	// ("eth,ib"), exact names after "=" ("=eth0"), or prefixes to exclude
	// after "^" ("^docker,lo"). Empty means any interface but loopback and
	// docker bridges, or loopback when there is no other.
	Iface string
	// Streams is the number of TCP streams per connection (1 to
	// MaxStreams; 0 means DefaultStreams). Messages of at least 2 MiB are
	// striped across them in parts of at least 1 MiB; smaller ones above
	// EagerLimit go whole, each on the next stream; eager messages and
	// control go on the first. The connecting side's value is used.
	Streams int
	// EagerLimit is the largest message sent without waiting for its
	// receive to be posted (0 means DefaultEagerLimit).
	EagerLimit int
	// MaxRequests is the number of requests a connection accepts in
	// flight (0 means DefaultMaxRequests).
	MaxRequests int
	// PeerTimeout bounds how long a peer host may be unreachable before
	// its connections fail (TCP keepalive and TCP_USER_TIMEOUT; 0 means
	// DefaultPeerTimeout).
	PeerTimeout time.Duration
	// Spin is how long the reader of a connection's first stream (eager
	// messages and control) keeps trying the socket without blocking,
	// yielding in between, before it waits in the netpoller: each time it
	// looks for more (0 means DefaultSpin; negative means never spin).
	Spin time.Duration
}

// Transport is the TCP transport. Create it with New.
type Transport struct {
	name   string // in errors: "tcp", or the plugin whose sockets it adopts
	opts   Options
	ifname string
	ip     net.IP

	conns closers.Set // listeners and connections, closed by Close
}

var _ transport.Transport = (*Transport)(nil)

// New returns a TCP transport that listens on the interface opts.Iface
// chooses. It fails when no interface matches.
func New(opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	ifs, err := systemIfaces()
	if err != nil {
		return nil, fmt.Errorf("tcp: list interfaces: %w", err)
	}
	name, ip, err := pickAddr(opts.Iface, ifs)
	if err != nil {
		return nil, err
	}
	return &Transport{name: "tcp", opts: opts, ifname: name, ip: ip}, nil
}

// fill replaces zero values with the defaults and checks the rest.
func (opts *Options) fill() error {
	switch {
	case opts.Streams == 0:
		opts.Streams = DefaultStreams
	case opts.Streams < 0 || opts.Streams > MaxStreams:
		return fmt.Errorf("tcp: %d streams: must be 1 to %d", opts.Streams, MaxStreams)
	}
	if opts.EagerLimit <= 0 {
		opts.EagerLimit = DefaultEagerLimit
	}
	if opts.EagerLimit > eagerWindow/2 {
		opts.EagerLimit = eagerWindow / 2
	}
	if opts.Spin == 0 {
		opts.Spin = DefaultSpin
	}
	if opts.MaxRequests <= 0 {
		opts.MaxRequests = DefaultMaxRequests
	}
	if opts.PeerTimeout <= 0 {
		opts.PeerTimeout = DefaultPeerTimeout
	}
	return nil
}

// Interface returns the name and address of the interface the transport
// listens on.
func (t *Transport) Interface() (string, net.IP) { return t.ifname, t.ip }

// Info implements transport.Transport.
func (t *Transport) Info() transport.Info {
	return transport.Info{Name: t.name, EagerLimit: t.opts.EagerLimit, MaxRequests: t.opts.MaxRequests}
}

// Close implements transport.Transport.
func (t *Transport) Close() error {
	t.conns.CloseAll()
	return nil
}

// A handle is 't', version, address length (4 or 16), the address, the
// port (big endian) and the listener's 16-byte nonce.
const handleVersion = 1

type handle struct {
	ip    net.IP
	port  int
	nonce [16]byte
}

func (h handle) marshal() transport.Handle {
	ip := h.ip.To4()
	if ip == nil {
		ip = h.ip.To16()
	}
	b := []byte{'t', handleVersion, byte(len(ip))}
	b = append(b, ip...)
	b = binary.BigEndian.AppendUint16(b, uint16(h.port))
	return append(b, h.nonce[:]...)
}

func (h handle) addr() string { return net.JoinHostPort(h.ip.String(), fmt.Sprint(h.port)) }

func parseHandle(b []byte) (handle, error) {
	var h handle
	if len(b) < 3 || b[0] != 't' {
		return h, fmt.Errorf("tcp: %w: not a tcp handle (%d bytes)", transport.ErrBadHandle, len(b))
	}
	if b[1] != handleVersion {
		return h, fmt.Errorf("tcp: %w: version %d, this gorun speaks %d", transport.ErrBadHandle, b[1], handleVersion)
	}
	n := int(b[2])
	if (n != 4 && n != 16) || len(b) != 3+n+2+16 {
		return h, fmt.Errorf("tcp: %w: malformed (%d bytes, address length %d)", transport.ErrBadHandle, len(b), n)
	}
	h.ip = net.IP(append([]byte(nil), b[3:3+n]...))
	h.port = int(binary.BigEndian.Uint16(b[3+n:]))
	copy(h.nonce[:], b[3+n+2:])
	if h.port == 0 || h.ip.IsUnspecified() {
		return h, fmt.Errorf("tcp: %w: address %s", transport.ErrBadHandle, h.addr())
	}
	return h, nil
}

// The hello that opens each stream.
const (
	helloSize  = 32
	helloMagic = "GRT\x01"
	ackOK      = 'K'
	ackRefused = 'N'
)

type hello struct {
	nonce  [16]byte
	connID [8]byte
	index  int
	count  int
}

func (h hello) marshal() []byte {
	b := make([]byte, 0, helloSize)
	b = append(b, helloMagic...)
	b = append(b, h.nonce[:]...)
	b = append(b, h.connID[:]...)
	b = append(b, byte(h.index), byte(h.count), 0, 0)
	return b
}

func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloSize || string(b[:4]) != helloMagic {
		return h, fmt.Errorf("%w: bad hello", transport.ErrProtocol)
	}
	copy(h.nonce[:], b[4:20])
	copy(h.connID[:], b[20:28])
	h.index, h.count = int(b[28]), int(b[29])
	if h.count < 1 || h.count > MaxStreams || h.index >= h.count {
		return h, fmt.Errorf("%w: hello for stream %d of %d", transport.ErrProtocol, h.index, h.count)
	}
	return h, nil
}

// Listen implements transport.Transport.
func (t *Transport) Listen(ctx context.Context) (transport.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t.ip == nil {
		return nil, fmt.Errorf("tcp: listen: %w: this transport only adopts sockets", transport.ErrNotSupported)
	}
	var lc net.ListenConfig
	nl, err := lc.Listen(ctx, "tcp", net.JoinHostPort(t.ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: listen on %s (%s): %w", t.ip, t.ifname, err)
	}
	l := &listener{t: t, groups: make(map[[8]byte]*group)}
	if _, err := rand.Read(l.nonce[:]); err != nil {
		nl.Close()
		return nil, fmt.Errorf("tcp: listen: %w", err)
	}
	l.handle = handle{ip: t.ip, port: nl.Addr().(*net.TCPAddr).Port, nonce: l.nonce}.marshal()
	l.Listener = connbase.NewListener(nl, "tcp", nl.Addr().String(), &t.conns, l.handshake)
	if err := t.conns.Add(l); err != nil {
		nl.Close()
		return nil, err
	}
	l.Start()
	return l, nil
}

// listener is a listening socket: connbase.Listener around the handshake
// of tcp's connections, which gathers a connection's streams.
type listener struct {
	*connbase.Listener[*net.TCPConn]
	t      *Transport
	nonce  [16]byte
	handle transport.Handle

	mu     sync.Mutex
	groups map[[8]byte]*group // nil once closed
}

// group gathers the streams of one connection as they arrive.
type group struct {
	conns []*net.TCPConn
	n     int
	timer *time.Timer
}

// Handle implements transport.Listener.
func (l *listener) Handle() transport.Handle { return append(transport.Handle(nil), l.handle...) }

// handshake takes a stream's hello and keeps the stream in its
// connection's group; the stream that completes the group makes the
// connection.
func (l *listener) handshake(c *net.TCPConn) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	b := make([]byte, helloSize)
	_, err := io.ReadFull(c, b)
	if open := l.Heard(c); err != nil || !open {
		c.Close()
		return
	}
	h, err := parseHello(b)
	if err != nil || h.nonce != l.nonce {
		c.Write([]byte{ackRefused})
		c.Close()
		return
	}
	l.mu.Lock()
	if l.groups == nil { // closed
		l.mu.Unlock()
		c.Close()
		return
	}
	g := l.groups[h.connID]
	if g == nil {
		g = &group{conns: make([]*net.TCPConn, h.count)}
		id := h.connID
		g.timer = time.AfterFunc(handshakeTimeout, func() { l.dropGroup(id, g) })
		l.groups[h.connID] = g
	}
	if len(g.conns) != h.count || g.conns[h.index] != nil {
		l.mu.Unlock()
		c.Write([]byte{ackRefused})
		c.Close()
		return
	}
	g.conns[h.index] = c
	g.n++
	if g.n < h.count {
		l.mu.Unlock()
		return
	}
	delete(l.groups, h.connID)
	g.timer.Stop()
	l.mu.Unlock()

	for _, sc := range g.conns {
		if _, err := sc.Write([]byte{ackOK}); err != nil {
			closeAll(g.conns)
			return
		}
		sc.SetDeadline(time.Time{})
	}
	l.Deliver(newRecvConn(l.t, g.conns))
}

func (l *listener) dropGroup(id [8]byte, g *group) {
	l.mu.Lock()
	if l.groups[id] == g {
		delete(l.groups, id)
	} else {
		g = nil
	}
	l.mu.Unlock()
	if g != nil {
		closeAll(g.conns)
	}
}

// Close implements transport.Listener.
func (l *listener) Close() error {
	l.mu.Lock()
	groups := l.groups
	l.groups = nil
	l.mu.Unlock()
	for _, g := range groups {
		g.timer.Stop()
		closeAll(g.conns)
	}
	l.Listener.Close()
	l.t.conns.Remove(l)
	return nil
}

func closeAll(cs []*net.TCPConn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// Connect implements transport.Transport.
func (t *Transport) Connect(ctx context.Context, hb transport.Handle) (transport.SendConn, error) {
	h, err := parseHandle(hb)
	if err != nil {
		return nil, err
	}
	addr := h.addr()
	peerErr := func(err error) error {
		return &transport.PeerError{Transport: "tcp", Op: "connect", Peer: addr, Err: err}
	}
	hl := hello{nonce: h.nonce, count: t.opts.Streams}
	if _, err := rand.Read(hl.connID[:]); err != nil {
		return nil, fmt.Errorf("tcp: connect: %w", err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handshakeTimeout)
	}
	var d net.Dialer
	conns := make([]*net.TCPConn, 0, hl.count)
	fail := func(err error) (transport.SendConn, error) {
		closeAll(conns)
		return nil, peerErr(err)
	}
	for i := range hl.count {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fail(err)
		}
		tc := c.(*net.TCPConn)
		conns = append(conns, tc)
		hl.index = i
		tc.SetDeadline(deadline)
		if _, err := tc.Write(hl.marshal()); err != nil {
			return fail(err)
		}
	}
	stop := context.AfterFunc(ctx, func() { closeAll(conns) })
	defer stop()
	for _, c := range conns {
		var ack [1]byte
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			} else if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: listener closed the connection during the handshake", transport.ErrBadHandle)
			}
			return fail(err)
		}
		if ack[0] != ackOK {
			return fail(fmt.Errorf("%w: the listener refused it (stale handle or another listener on that port)", transport.ErrBadHandle))
		}
	}
	if !stop() {
		return fail(ctx.Err())
	}
	for _, c := range conns {
		c.SetDeadline(time.Time{})
	}
	sc := newSendConn(t, conns, addr)
	sc.Start()
	if err := t.conns.Add(sc); err != nil {
		sc.Close()
		return nil, fmt.Errorf("tcp: connect: %w", err)
	}
	return sc, nil
}
