package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
)

// handlePrefix starts every handle of this transport. A handle is text,
// "tcpexample/", the listener's IP and port, "/" and a checksum of what
// comes before ("tcpexample/127.0.0.1:40123/9f3a01c2"): easy to read in
// logs, and the prefix and checksum tell a handle of ours from any other
// bytes, even a cut or extended copy of one, which Connect must refuse
// with sdk.ErrBadHandle.
const handlePrefix = "tcpexample/"

// makeHandle returns the handle of a listener at addr.
func makeHandle(addr string) []byte {
	text := handlePrefix + addr
	return fmt.Appendf(nil, "%s/%08x", text, crc32.ChecksumIEEE([]byte(text)))
}

// tcpTransport is the sdk.Transport of one rank: it listens on one IPv4
// address and keeps track of what it opened, so that Close can close it.
type tcpTransport struct {
	ip      netip.Addr // where listeners listen
	iface   string     // the interface that holds ip, for Devices
	wake    func()     // sdk.Config.Wake
	streams int        // TCP connections per gorun connection (handoff.go)

	mu     sync.Mutex
	closed bool
	open   map[closer]bool // listeners and connections not yet closed
}

// closer is anything Transport.Close must close.
type closer interface{ Close() error }

// track adds c to what Close closes, or fails once the transport is
// closed.
func (t *tcpTransport) track(c closer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("tcpexample: %w", sdk.ErrClosed)
	}
	t.open[c] = true
	return nil
}

// untrack forgets c, which closed itself.
func (t *tcpTransport) untrack(c closer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.open, c)
}

// Listen listens on a port the kernel picks.
func (t *tcpTransport) Listen(ctx context.Context) (sdk.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp4", netip.AddrPortFrom(t.ip, 0).String())
	if err != nil {
		return nil, fmt.Errorf("tcpexample: listen on %s: %w", t.ip, err)
	}
	l := &listener{t: t, ln: ln.(*net.TCPListener), ready: make(chan []*net.TCPConn),
		done: make(chan struct{}), partial: map[[8]byte][]*net.TCPConn{}}
	if err := t.track(l); err != nil {
		ln.Close()
		return nil, err
	}
	go l.acceptLoop()
	return l, nil
}

// Connect parses the handle, opens the connection's streams, each with
// its hello, and starts the writer of the new send side.
func (t *tcpTransport) Connect(ctx context.Context, handle []byte) (sdk.SendConn, error) {
	addr, err := parseHandle(handle)
	if err != nil {
		return nil, err
	}
	h := hello{count: t.streams}
	if _, err := rand.Read(h.id[:]); err != nil {
		return nil, fmt.Errorf("tcpexample: connect: %w", err)
	}
	var d net.Dialer
	socks := make([]*net.TCPConn, 0, t.streams)
	for i := range t.streams {
		c, err := d.DialContext(ctx, "tcp4", addr.String())
		if err == nil {
			socks = append(socks, c.(*net.TCPConn))
			h.index = i
			_, err = c.Write(h.marshal())
		}
		if err != nil {
			closeAll(socks)
			return nil, fmt.Errorf("tcpexample: connect to %s: %w", addr, err)
		}
		tune(c.(*net.TCPConn))
	}
	s := newSendConn(t, socks)
	if err := t.track(s); err != nil {
		closeAll(socks)
		return nil, err
	}
	go s.writer()
	return s, nil
}

// parseHandle returns the address in a handle, or an error wrapping
// sdk.ErrBadHandle.
func parseHandle(handle []byte) (netip.AddrPort, error) {
	if !bytes.HasPrefix(handle, []byte(handlePrefix)) {
		return netip.AddrPort{}, fmt.Errorf("tcpexample: handle %q does not start with %q: %w", handle, handlePrefix, sdk.ErrBadHandle)
	}
	i := bytes.LastIndexByte(handle, '/')
	if i < len(handlePrefix) || !bytes.Equal(makeHandle(string(handle[len(handlePrefix):i])), handle) {
		return netip.AddrPort{}, fmt.Errorf("tcpexample: handle %q: checksum does not match: %w", handle, sdk.ErrBadHandle)
	}
	addr, err := netip.ParseAddrPort(string(handle[len(handlePrefix):i]))
	if err != nil || !addr.Addr().Is4() || addr.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("tcpexample: handle %q: not an IPv4 address and port: %w", handle, sdk.ErrBadHandle)
	}
	return addr, nil
}

// tune sets what every connection wants: no Nagle delay (a message must
// leave as soon as it is sent), and keepalives, so that a peer whose host
// vanished is noticed eventually. (A production transport would also set
// TCP_USER_TIMEOUT to bound that.)
func tune(c *net.TCPConn) {
	c.SetNoDelay(true)
	c.SetKeepAlive(true)
	c.SetKeepAlivePeriod(5 * time.Second)
}

// Register has nothing to do: TCP reads and writes any memory. The SDK
// passes the nil Registration back with Send and Recv, where we ignore it.
func (t *tcpTransport) Register(mem []byte) (sdk.Registration, error) { return nil, nil }

// Deregister has nothing to release.
func (t *tcpTransport) Deregister(r sdk.Registration) error { return nil }

// Close closes every listener and connection; their Close methods fail
// the pending requests with sdk.ErrClosed. Closing twice is harmless.
func (t *tcpTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	open := t.open
	t.open = make(map[closer]bool)
	t.mu.Unlock()
	for c := range open {
		c.Close()
	}
	return nil
}

// listener is an sdk.Listener: a TCP listener and the goroutines that
// read each new stream's hello and gather the streams of a connection;
// Accept returns the receive sides of complete ones.
type listener struct {
	t      *tcpTransport
	ln     *net.TCPListener
	ready  chan []*net.TCPConn // the streams of a connection, in order
	done   chan struct{}       // closed by Close
	closed atomic.Bool

	mu      sync.Mutex
	partial map[[8]byte][]*net.TCPConn // connections still missing streams
}

// Handle returns "tcpexample/IP:PORT/CHECKSUM".
func (l *listener) Handle() []byte {
	return makeHandle(l.ln.Addr().String())
}

// acceptLoop accepts streams until the listener closes.
func (l *listener) acceptLoop() {
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			return
		}
		go l.gather(c)
	}
}

// gather reads the hello of a new stream and files the stream with the
// others of its connection; the last one to arrive completes it.
func (l *listener) gather(c *net.TCPConn) {
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	var b [helloSize]byte
	_, err := io.ReadFull(c, b[:])
	c.SetReadDeadline(time.Time{})
	h, perr := parseHello(b[:])
	if err != nil || perr != nil {
		c.Close() // not one of ours, or too slow
		return
	}
	tune(c)
	l.mu.Lock()
	socks := l.partial[h.id]
	if socks == nil {
		socks = make([]*net.TCPConn, h.count)
		l.partial[h.id] = socks
		id := h.id
		time.AfterFunc(helloTimeout, func() { l.drop(id) })
	}
	if len(socks) != h.count || socks[h.index] != nil {
		l.mu.Unlock()
		c.Close()
		return
	}
	socks[h.index] = c
	for _, s := range socks {
		if s == nil {
			l.mu.Unlock()
			return
		}
	}
	delete(l.partial, h.id)
	l.mu.Unlock()
	select {
	case l.ready <- socks:
	case <-l.done:
		closeAll(socks)
	}
}

// drop gives up on a connection whose streams did not all arrive in time.
func (l *listener) drop(id [8]byte) {
	l.mu.Lock()
	socks := l.partial[id]
	delete(l.partial, id)
	l.mu.Unlock()
	closeAll(socks)
}

// Accept waits for the next complete connection, or for ctx to end.
func (l *listener) Accept(ctx context.Context) (sdk.RecvConn, error) {
	var socks []*net.TCPConn
	select {
	case socks = <-l.ready:
	case <-l.done:
		return nil, fmt.Errorf("tcpexample: accept: %w", sdk.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("tcpexample: accept: %w", ctx.Err())
	}
	r := newRecvConn(l.t, socks)
	if err := l.t.track(r); err != nil {
		closeAll(socks)
		return nil, err
	}
	go r.reader()
	return r, nil
}

// Close stops listening; the connections it accepted stay open, those
// still gathering their streams close.
func (l *listener) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.done)
	l.t.untrack(l)
	err := l.ln.Close()
	l.mu.Lock()
	for id, socks := range l.partial {
		closeAll(socks)
		delete(l.partial, id)
	}
	l.mu.Unlock()
	if err != nil && !isClosedErr(err) {
		return fmt.Errorf("tcpexample: close listener: %w", err)
	}
	return nil
}

// closeAll closes the streams in socks that are open (not nil).
func closeAll(socks []*net.TCPConn) {
	for _, c := range socks {
		if c != nil {
			c.Close()
		}
	}
}
