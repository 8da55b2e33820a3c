package tcp

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/gorun/gorun/transport"
)

// adoptNonce stands in a hello's nonce on the streams of an adopted
// connection: no listener of this package made them, and the receiving
// side checks that the sending side adopted its sockets too.
var adoptNonce = [16]byte{'g', 'o', 'r', 'u', 'n', ' ', 'h', 'a', 'n', 'd', 'o', 'f', 'f', 0, 0, 1}

// ForSockets returns a Transport that listens nowhere and moves data over
// sockets that something else connected (a transport plugin that hands
// its connections to the rank): see AdoptSend and AdoptRecv. Its errors
// and Info name it name (the plugin's name). Its Listen fails with
// transport.ErrNotSupported; opts.Iface and opts.Streams do not apply.
func ForSockets(name string, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	return &Transport{name: name, opts: opts}, nil
}

// AdoptSend makes a connection's send side of socks, connected TCP
// sockets on which nothing was sent or received yet, in the order the
// sending side opened them; their receiving side must call AdoptRecv with
// the same sockets' other ends, in the same order. The connection owns
// the sockets from then on (socks are closed here, the connection keeps
// duplicates). Each stream opens with a hello that names its place, so
// that a receiver that did not adopt, or got the streams in another
// order, fails the connection with transport.ErrProtocol rather than
// read garbage.
func (t *Transport) AdoptSend(socks []*os.File, peer string) (transport.SendConn, error) {
	conns, err := adopt(socks)
	if err != nil {
		return nil, err
	}
	hl := hello{nonce: adoptNonce, count: len(conns)}
	if _, err := rand.Read(hl.connID[:]); err != nil {
		closeAll(conns)
		return nil, fmt.Errorf("%s: adopt: %w", t.name, err)
	}
	for i, c := range conns {
		hl.index = i
		c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		_, err := c.Write(hl.marshal())
		c.SetWriteDeadline(time.Time{})
		if err != nil {
			closeAll(conns)
			return nil, &transport.PeerError{Transport: t.name, Op: "adopt", Peer: peer, Err: lost(err)}
		}
	}
	sc := newSendConn(t, conns, peer)
	sc.Start()
	if err := t.conns.Add(sc); err != nil {
		sc.Close()
		return nil, fmt.Errorf("%s: adopt: %w", t.name, err)
	}
	return sc, nil
}

// AdoptRecv makes a connection's receive side of socks, as AdoptSend
// describes; peer names the other end in errors ("" for the first
// socket's remote address).
func (t *Transport) AdoptRecv(socks []*os.File, peer string) (transport.RecvConn, error) {
	conns, err := adopt(socks)
	if err != nil {
		return nil, err
	}
	rc := newRecvConn(t, conns)
	rc.adopted = true
	if peer != "" {
		rc.PeerName = peer
	}
	rc.Start()
	if err := t.conns.Add(rc); err != nil {
		rc.Close()
		return nil, fmt.Errorf("%s: adopt: %w", t.name, err)
	}
	return rc, nil
}

// adopt turns socks into TCP connections and closes socks.
func adopt(socks []*os.File) ([]*net.TCPConn, error) {
	defer func() {
		for _, f := range socks {
			f.Close()
		}
	}()
	if len(socks) == 0 || len(socks) > MaxStreams {
		return nil, fmt.Errorf("tcp: adopt: %d sockets (1 to %d allowed)", len(socks), MaxStreams)
	}
	conns := make([]*net.TCPConn, 0, len(socks))
	for i, f := range socks {
		c, err := net.FileConn(f)
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				conns = append(conns, tc)
				continue
			}
			c.Close()
			err = fmt.Errorf("a %s socket, not TCP", c.LocalAddr().Network())
		}
		closeAll(conns)
		return nil, fmt.Errorf("tcp: adopt: socket %d of %d: %w", i+1, len(socks), err)
	}
	return conns, nil
}

// checkAdopted reads the hello that opens stream i of an adopted
// connection of n streams.
func checkAdopted(b []byte, i, n int) error {
	h, err := parseHello(b)
	switch {
	case err != nil:
		return fmt.Errorf("%w: stream %d of a handed-off connection opens without gorun's hello: did the sending side hand its sockets off too?", transport.ErrProtocol, i)
	case h.nonce != adoptNonce:
		return fmt.Errorf("%w: stream %d of a handed-off connection opens with a listener's hello", transport.ErrProtocol, i)
	case h.index != i || h.count != n:
		return fmt.Errorf("%w: stream %d of %d of a handed-off connection says it is stream %d of %d: the plugin gave its sockets in another order", transport.ErrProtocol, i, n, h.index, h.count)
	}
	return nil
}
