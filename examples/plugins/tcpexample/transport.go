package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
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
	ip    netip.Addr // where listeners listen
	iface string     // the interface that holds ip, for Devices
	wake  func()     // sdk.Config.Wake

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
	l := &listener{t: t, ln: ln.(*net.TCPListener)}
	if err := t.track(l); err != nil {
		ln.Close()
		return nil, err
	}
	return l, nil
}

// Connect parses the handle, dials it and starts the writer of the new
// send side.
func (t *tcpTransport) Connect(ctx context.Context, handle []byte) (sdk.SendConn, error) {
	addr, err := parseHandle(handle)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", addr.String())
	if err != nil {
		return nil, fmt.Errorf("tcpexample: connect to %s: %w", addr, err)
	}
	tune(c.(*net.TCPConn))
	s := newSendConn(t, c)
	if err := t.track(s); err != nil {
		c.Close()
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

// listener is an sdk.Listener: a TCP listener whose Accept returns
// receive sides.
type listener struct {
	t      *tcpTransport
	ln     *net.TCPListener
	closed atomic.Bool
	// accepting is held by one Accept at a time: the deadline that ends
	// an Accept whose ctx ended is the listener's, and would end another
	// Accept too. A caller that gave up on an Accept (its ctx's deadline)
	// can start the next before the first has returned here, the calls
	// coming over RPC.
	accepting sync.Mutex
}

// Handle returns "tcpexample/IP:PORT/CHECKSUM".
func (l *listener) Handle() []byte {
	return makeHandle(l.ln.Addr().String())
}

// Accept waits for the next connection, or for ctx to end: net.Listener's
// Accept knows no context, so when ctx ends we set a deadline in the past,
// which makes the pending Accept return.
func (l *listener) Accept(ctx context.Context) (sdk.RecvConn, error) {
	l.accepting.Lock()
	defer l.accepting.Unlock()
	set := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { l.ln.SetDeadline(time.Unix(1, 0)); close(set) })
	c, err := l.ln.AcceptTCP()
	if !stop() {
		// The deadline was set: clear it once it is, so that the next
		// Accept waits again.
		<-set
		l.ln.SetDeadline(time.Time{})
	}
	if err != nil {
		if l.closed.Load() {
			return nil, fmt.Errorf("tcpexample: accept: %w", sdk.ErrClosed)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tcpexample: accept: %w", ctx.Err())
		}
		return nil, fmt.Errorf("tcpexample: accept: %w", err)
	}
	tune(c)
	r := newRecvConn(l.t, c)
	if err := l.t.track(r); err != nil {
		c.Close()
		return nil, err
	}
	go r.reader()
	return r, nil
}

// Close stops listening; the connections it accepted stay open.
func (l *listener) Close() error {
	l.closed.Store(true)
	l.t.untrack(l)
	if err := l.ln.Close(); err != nil && !isClosedErr(err) {
		return fmt.Errorf("tcpexample: close listener: %w", err)
	}
	return nil
}
