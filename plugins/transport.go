package plugins

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/closers"
	"github.com/gorun/gorun/internal/memreg"
	"github.com/gorun/gorun/internal/request"
	"github.com/gorun/gorun/internal/shmring"
	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
)

// maxRequests is how many requests one connection keeps in flight.
const maxRequests = 1024

// Transport is a plugin's transport as a gorun transport.Transport: the
// control calls go to the plugin over gRPC, transfers through the shared
// rings. Closing it closes the plugin.
type Transport struct {
	c   *Client
	set closers.Set
}

var _ transport.Transport = (*Transport)(nil)

// OpenTransport starts the plugin and returns its transport, which owns
// the plugin process.
func OpenTransport(o Options) (*Transport, error) {
	c, err := Open(o)
	if err != nil {
		return nil, err
	}
	t, err := c.Transport()
	if err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

// Transport returns the plugin's transport; closing it closes c.
func (c *Client) Transport() (*Transport, error) {
	if !c.info.Transport {
		return nil, fmt.Errorf("plugin %s (%s): %w: it provides no transport", c.name, c.path, transport.ErrNotSupported)
	}
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.tr == nil {
		c.tr = &Transport{c: c}
	}
	return c.tr, nil
}

// HandsOff reports whether the plugin hands the sockets of its connections
// to the rank (sdk.Handoff), whose built-in TCP protocol then moves the
// data: the plugin only sets connections up.
func (t *Transport) HandsOff() bool { return t.c.handoff }

// Client returns the plugin the transport belongs to.
func (t *Transport) Client() *Client { return t.c }

// Info implements transport.Transport.
func (t *Transport) Info() transport.Info {
	if t.c.handoff {
		// The connections are the built-in TCP transport's.
		i := t.c.sockets.Info()
		i.Name = t.c.name
		return i
	}
	// Every send goes out at once, whatever its size: the SDK sends a
	// header then the data, and only the plugin's network can make it
	// wait for the receiver (fabric's rendezvous does; a TCP socket
	// holds what fits in its buffers).
	return transport.Info{Name: t.c.name, EagerLimit: math.MaxInt, MaxRequests: maxRequests, ZeroCopy: true}
}

// Listen implements transport.Transport.
func (t *Transport) Listen(ctx context.Context) (transport.Listener, error) {
	if err := t.usable("listen"); err != nil {
		return nil, err
	}
	var r wire.ListenReply
	if err := t.c.ctl.Call(ctx, "Listen", &wire.Empty{}, &r); err != nil {
		return nil, t.ctlErr("listen", "", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &listener{t: t, id: r.ID, h: r.Handle, ctx: lctx, cancel: cancel}
	if err := t.set.Add(l); err != nil {
		l.Close()
		return nil, t.opErr("listen", "", err)
	}
	return l, nil
}

// Connect implements transport.Transport.
func (t *Transport) Connect(ctx context.Context, h transport.Handle) (transport.SendConn, error) {
	if err := t.usable("connect"); err != nil {
		return nil, err
	}
	if len(h) == 0 || len(h) > transport.MaxHandleSize {
		return nil, fmt.Errorf("%s: connect: %w: %d bytes", t.c.name, transport.ErrBadHandle, len(h))
	}
	var r wire.ConnReply
	if err := t.c.ctl.Call(ctx, "Connect", &wire.ConnectReq{Handle: h}, &r); err != nil {
		if errors.Is(err, transport.ErrBadHandle) {
			return nil, fmt.Errorf("%s: connect: %w", t.c.name, err)
		}
		return nil, t.ctlErr("connect", "", err)
	}
	if r.Sockets > 0 {
		socks, err := t.c.takeSockets(r)
		if err != nil {
			return nil, t.opErr("connect", r.Peer, err)
		}
		return t.c.sockets.AdoptSend(socks, r.Peer)
	}
	return t.newConn(r, "isend")
}

func (t *Transport) newConn(r wire.ConnReply, op string) (*conn, error) {
	cn := &conn{t: t, id: r.ID, peer: r.Peer}
	if err := t.set.Add(cn); err != nil {
		cn.Close()
		return nil, t.opErr(op, r.Peer, err)
	}
	return cn, nil
}

// Close implements transport.Transport: it closes every listener and
// connection (the handed-off ones too), then the plugin.
func (t *Transport) Close() error {
	t.set.CloseAll()
	if t.c.sockets != nil {
		t.c.sockets.Close()
	}
	return t.c.Close()
}

func (t *Transport) usable(op string) error {
	if err := t.c.lostErr(); err != nil {
		return t.opErr(op, "", err)
	}
	select {
	case <-t.c.closed:
		return t.opErr(op, "", transport.ErrClosed)
	default:
	}
	return nil
}

func (t *Transport) opErr(op, peer string, err error) error {
	return &transport.PeerError{Transport: t.c.name, Op: op, Peer: peer, Err: err}
}

// ctlErr is the error of a failed control call: the plugin's loss when it
// exited, else the call's.
func (t *Transport) ctlErr(op, peer string, err error) error {
	if lost := t.c.lostErr(); lost != nil {
		err = lost
	} else if t.c.ctl != nil {
		select {
		case <-t.c.ctl.Exited():
			err = fmt.Errorf("%w: plugin %s (%s) exited%s", transport.ErrTransportLost, t.c.name, t.c.path, t.c.tail.suffix())
		default:
		}
	}
	return t.opErr(op, peer, err)
}

// listener is a plugin's listener.
type listener struct {
	t      *Transport
	id     uint64
	h      []byte
	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
}

func (l *listener) Handle() transport.Handle { return l.h }

func (l *listener) Accept(ctx context.Context) (transport.RecvConn, error) {
	if l.closed.Load() {
		return nil, l.t.opErr("accept", "", transport.ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	var r wire.ConnReply
	if err := l.t.c.ctl.Call(ctx, "Accept", &wire.IDReq{ID: l.id}, &r); err != nil {
		if l.closed.Load() {
			return nil, l.t.opErr("accept", "", transport.ErrClosed)
		}
		if ctx.Err() != nil && l.t.c.lostErr() == nil {
			return nil, ctx.Err()
		}
		if l.closed.Load() {
			return nil, l.t.opErr("accept", "", transport.ErrClosed)
		}
		return nil, l.t.ctlErr("accept", "", err)
	}
	if l.closed.Load() {
		// Accepted as the listener closed: give the connection back (a
		// handed-off one's sockets are taken, so that the plugin does
		// not keep them, and closed).
		if r.Sockets > 0 {
			if socks, err := l.t.c.takeSockets(r); err == nil {
				for _, f := range socks {
					f.Close()
				}
			}
		} else {
			cn := &conn{t: l.t, id: r.ID, peer: r.Peer}
			cn.Close()
		}
		return nil, l.t.opErr("accept", r.Peer, transport.ErrClosed)
	}
	if r.Sockets > 0 {
		socks, err := l.t.c.takeSockets(r)
		if err != nil {
			return nil, l.t.opErr("accept", r.Peer, err)
		}
		return l.t.c.sockets.AdoptRecv(socks, r.Peer)
	}
	return l.t.newConn(r, "irecv")
}

func (l *listener) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.cancel()
	l.t.set.Remove(l)
	if l.t.c.lostErr() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.t.c.ctl.Call(ctx, "CloseListener", &wire.IDReq{ID: l.id}, &wire.Empty{})
	}
	return nil
}

// conn is one side of a plugin connection; the plugin knows which.
type conn struct {
	t        *Transport
	id       uint64
	peer     string
	inflight atomic.Int32
	closed   atomic.Bool
	failed   atomic.Pointer[error] // the peer went away
}

func (cn *conn) name() string {
	if cn.t == nil {
		return "plugin"
	}
	return cn.t.c.name
}

func (cn *conn) opErr(op string, err error) error {
	return &transport.PeerError{Transport: cn.name(), Op: op, Peer: cn.peer, Err: err}
}

func (cn *conn) Peer() string { return cn.peer }

func (cn *conn) RegMR(buf []byte) (transport.MemHandle, error) {
	if cn.closed.Load() {
		return nil, cn.opErr("regmr", transport.ErrClosed)
	}
	if r, _, ok := transport.FindRegion(buf); ok {
		if err := cn.t.c.share(r); err != nil {
			return nil, cn.opErr("regmr", err)
		}
	}
	return &memreg.Handle{Owner: cn, Buf: buf}, nil
}

func (cn *conn) DeregMR(mh transport.MemHandle) error {
	_, err := memreg.Release(cn.name(), cn, mh)
	return err
}

func (cn *conn) Isend(buf []byte, tag uint64, mh transport.MemHandle) (transport.Request, error) {
	return cn.post("isend", buf, tag, mh, false)
}

func (cn *conn) Irecv(buf []byte, tag uint64, mh transport.MemHandle) (transport.Request, error) {
	return cn.post("irecv", buf, tag, mh, true)
}

func (cn *conn) post(op string, buf []byte, tag uint64, mh transport.MemHandle, recv bool) (transport.Request, error) {
	c := cn.t.c
	if cn.closed.Load() {
		return nil, cn.opErr(op, transport.ErrClosed)
	}
	if f := cn.failed.Load(); f != nil {
		return nil, *f
	}
	m, err := memreg.Check(cn.name(), cn, mh, buf)
	if err != nil {
		return nil, err
	}
	if cn.inflight.Add(1) > maxRequests {
		cn.inflight.Add(-1)
		return nil, fmt.Errorf("%s: %s: %w", cn.name(), op, transport.ErrWouldBlock)
	}
	r := &hreq{Request: request.New(c), conn: cn, op: op, mh: m, counted: true}
	if m != nil {
		m.Uses.Add(1)
	}
	var ref wire.Ref
	small := len(buf) <= wire.Inline
	if !small {
		if reg, off, ok := transport.FindRegion(buf); ok && c.share(reg) == nil {
			ref = wire.Ref{Region: reg.ID(), Off: uint64(off), Len: uint64(len(buf))}
		} else {
			b, err := c.bounces.get(len(buf))
			if err != nil {
				r.release()
				return nil, cn.opErr(op, err)
			}
			r.bounce = b
			if recv {
				r.dst = buf
			} else {
				copy(b.Bytes(), buf)
			}
			ref = wire.Ref{Region: b.ID(), Len: uint64(len(buf))}
		}
	}
	if small && recv {
		r.inline, r.dst = true, buf
	}
	// From track on, the reaper may complete the request: set up first.
	if err := c.track(r); err != nil {
		r.release()
		return nil, err
	}
	switch {
	case small && !recv:
		c.submit(wire.SQSendInline, cn.id, r.id, tag, buf)
	case small:
		var p [8]byte
		binary.LittleEndian.PutUint64(p[:], uint64(len(buf)))
		c.submit(wire.SQRecvInline, cn.id, r.id, tag, p[:])
	case recv:
		c.submitRef(wire.SQRecvRef, cn.id, r.id, tag, ref)
	default:
		c.submitRef(wire.SQSendRef, cn.id, r.id, tag, ref)
	}
	return r, nil
}

// Close closes the connection: its requests in flight fail with
// transport.ErrClosed here, and the plugin closes its side.
func (cn *conn) Close() error {
	if cn.closed.Swap(true) {
		return nil
	}
	if cn.t == nil {
		return nil
	}
	cn.t.set.Remove(cn)
	c := cn.t.c
	c.cqMu.Lock()
	var mine []*hreq
	for id, r := range c.reqs {
		if r.conn == cn {
			mine = append(mine, r)
			delete(c.reqs, id)
		}
	}
	c.cqMu.Unlock()
	for _, r := range mine {
		r.abandon(cn.opErr(r.op, transport.ErrClosed))
	}
	// Ask the plugin to close its side, in order after the transfers
	// already submitted, and wait (bounded) so that a message whose send
	// completed is out before the connection goes.
	r := &hreq{Request: request.New(c), conn: &conn{t: cn.t, peer: cn.peer}, op: "close"}
	if c.track(r) == nil {
		c.submit(wire.SQCloseConn, cn.id, r.id, 0, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r.Wait(ctx)
		cancel()
	}
	return nil
}

// hreq is a request of the rank to the plugin.
type hreq struct {
	*request.Request
	id      uint64
	conn    *conn
	op      string
	inline  bool   // an inline receive: the data comes in the completion
	dst     []byte // the caller's buffer, for inline and bounced receives
	bounce  *transport.Region
	mh      *memreg.Handle
	counted bool   // counts toward conn's requests in flight
	reply   []byte // a device request's reply, once done
}

// result reads a completion record while it is valid; an inline receive's
// data is copied to its buffer here.
func (r *hreq) result(x shmring.Rec) result {
	res := result{n: int(x.B), status: x.C}
	switch {
	case r.inline && (x.C == wire.StatusOK || x.C == wire.StatusTruncated):
		res.n = copy(r.dst, x.Payload)
	case r.op == "device" && x.C == wire.StatusOK:
		res.data = bytes.Clone(x.Payload)
	case x.C != wire.StatusOK:
		res.text = string(x.Payload)
	}
	return res
}

// finish completes the request with what the plugin reported.
func (r *hreq) finish(res result) {
	var err error
	switch {
	case res.status == wire.StatusOK:
	case res.status == wire.StatusTruncated && r.op == "irecv":
		err = fmt.Errorf("%s: %w: message longer than the %d-byte buffer", r.conn.name(), transport.ErrTruncated, len(r.dst))
		if r.bounce == nil && !r.inline {
			err = fmt.Errorf("%s: %w: %s", r.conn.name(), transport.ErrTruncated, res.text)
		}
	case res.status == wire.StatusDeclined:
		err = wire.ErrDeclined
	default:
		cause := wire.Sentinel(res.status)
		if cause == nil {
			err = errors.New(res.text)
		} else {
			err = fmt.Errorf("%w (%s)", cause, res.text)
		}
		if r.op != "device" { // a device request's error names no peer
			err = r.conn.opErr(r.op, err)
		}
		if r.op == "isend" && (res.status == wire.StatusPeerLost || res.status == wire.StatusProtocol) {
			// The receiver is gone: later sends fail at once. (A receive
			// side still gets what arrived before; the plugin knows.)
			r.conn.failed.CompareAndSwap(nil, &err)
		}
	}
	if r.bounce != nil && r.dst != nil && (err == nil || res.status == wire.StatusTruncated) {
		res.n = copy(r.dst, r.bounce.Bytes()[:min(res.n, len(r.dst))])
	}
	if r.bounce != nil {
		r.conn.client().bounces.put(r.bounce)
		r.bounce = nil
	}
	r.reply = res.data
	r.release()
	r.Complete(res.n, err)
}

// abandon completes the request with err without waiting for the plugin,
// which may still use its bounce buffer: that buffer is not reused.
func (r *hreq) abandon(err error) {
	if r.bounce != nil {
		r.bounce.Close()
		r.bounce = nil
	}
	r.release()
	r.Complete(0, err)
}

// release returns what the request held.
func (r *hreq) release() {
	if r.mh != nil {
		r.mh.Uses.Add(-1)
		r.mh = nil
	}
	if r.counted {
		r.conn.inflight.Add(-1)
		r.counted = false
	}
}

func (cn *conn) client() *Client { return cn.t.c }

// share maps a region into the plugin (once per region).
func (c *Client) share(r *transport.Region) error {
	c.sockMu.Lock()
	defer c.sockMu.Unlock()
	if c.shared[r.ID()] {
		return nil
	}
	if err := c.lostErr(); err != nil {
		return err
	}
	m, fds, err := c.regionCall(wire.RegionMsg{ID: r.ID(), Size: uint64(r.Len()), Status: wire.RegionMap}, r.FD())
	for _, fd := range fds {
		closeFD(fd)
	}
	switch {
	case err != nil:
		return fmt.Errorf("sharing region %d with plugin %s: %w", r.ID(), c.name, err)
	case m.ID != r.ID() || m.Status != 0:
		return fmt.Errorf("plugin %s could not map region %d (%d bytes)%s", c.name, r.ID(), r.Len(), c.tail.suffix())
	}
	c.shared[r.ID()] = true
	return nil
}

// regionCall sends m (with fds) over the region socket and returns the
// plugin's answer, waiting at most 20s for it; the caller holds sockMu.
func (c *Client) regionCall(m wire.RegionMsg, fds ...int) (wire.RegionMsg, []int, error) {
	if err := wire.SendRegion(c.sock, m, fds...); err != nil {
		return wire.RegionMsg{}, nil, err
	}
	c.sock.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.sock.SetReadDeadline(time.Time{})
	return wire.RecvRegion(c.sock)
}

// takeSockets fetches the sockets of a connection the plugin handed off.
func (c *Client) takeSockets(r wire.ConnReply) ([]*os.File, error) {
	c.sockMu.Lock()
	defer c.sockMu.Unlock()
	if err := c.lostErr(); err != nil {
		return nil, err
	}
	if r.Sockets > wire.MaxSockets {
		return nil, fmt.Errorf("plugin %s handed off %d sockets (at most %d)", c.name, r.Sockets, wire.MaxSockets)
	}
	m, fds, err := c.regionCall(wire.RegionMsg{ID: r.ID, Status: wire.RegionSockets})
	socks := make([]*os.File, len(fds))
	for i, fd := range fds {
		socks[i] = os.NewFile(uintptr(fd), "handed-off socket")
	}
	if err == nil && (m.ID != r.ID || m.Status != 0 || len(socks) != r.Sockets) {
		err = fmt.Errorf("%w: plugin %s sent %d sockets (status %d) for connection %d, which it said has %d%s",
			transport.ErrProtocol, c.name, len(socks), m.Status, m.ID, r.Sockets, c.tail.suffix())
	}
	if err != nil {
		for _, f := range socks {
			f.Close()
		}
		return nil, fmt.Errorf("taking the sockets of connection %d from plugin %s: %w", r.ID, c.name, err)
	}
	return socks, nil
}

// bouncePool keeps shared buffers for transfers from and to memory the
// plugin cannot map (ordinary Go memory), by power-of-two size.
type bouncePool struct {
	c    *Client
	mu   sync.Mutex
	free map[int][]*transport.Region
	all  []*transport.Region
}

const minBounce = 64 << 10

func (p *bouncePool) get(n int) (*transport.Region, error) {
	size := max(minBounce, 1<<bits.Len(uint(n-1)))
	p.mu.Lock()
	if l := p.free[size]; len(l) > 0 {
		r := l[len(l)-1]
		p.free[size] = l[:len(l)-1]
		p.mu.Unlock()
		return r, nil
	}
	p.mu.Unlock()
	r, err := transport.Alloc(size)
	if err != nil {
		return nil, err
	}
	if err := p.c.share(r); err != nil {
		r.Close()
		return nil, err
	}
	p.mu.Lock()
	p.all = append(p.all, r)
	p.mu.Unlock()
	return r, nil
}

func (p *bouncePool) put(r *transport.Region) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[int][]*transport.Region{}
	}
	p.free[r.Len()] = append(p.free[r.Len()], r)
}

func (p *bouncePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.all {
		r.Close()
	}
	p.all, p.free = nil, nil
}

// Op describes a collective operation for a collective plugin.
type Op = wire.CollOp

// Collective is the rank's side of a plugin's collective implementation.
type Collective struct {
	c    *Client
	conn *conn
}

// Collective returns the plugin's collective implementation; it stays
// valid until c closes.
func (c *Client) Collective() (*Collective, error) {
	if !c.info.Collective {
		return nil, fmt.Errorf("plugin %s (%s): %w: it provides no collective", c.name, c.path, transport.ErrNotSupported)
	}
	t := &Transport{c: c}
	return &Collective{c: c, conn: &conn{t: t, peer: "collective"}}, nil
}

// Handle returns the bytes the other ranks' plugins need.
func (k *Collective) Handle(ctx context.Context) ([]byte, error) {
	var r wire.HandleReply
	if err := k.c.ctl.Call(ctx, "CollHandle", &wire.Empty{}, &r); err != nil {
		return nil, k.c.fail(fmt.Errorf("collective handle: %w", err))
	}
	return r.Handle, nil
}

// Join gives the plugin every rank's handle, in rank order.
func (k *Collective) Join(ctx context.Context, handles [][]byte) error {
	if err := k.c.ctl.Call(ctx, "CollJoin", &wire.JoinReq{Handles: handles}, &wire.Empty{}); err != nil {
		return k.c.fail(fmt.Errorf("collective join: %w", err))
	}
	return nil
}

// Run offers op to the plugin with its input in send and output in recv
// (which may be the same memory). It reports false, with a nil error, when
// the plugin declined and the caller must run op itself.
func (k *Collective) Run(ctx context.Context, op Op, send, recv []byte) (bool, error) {
	c := k.c
	r := &hreq{Request: request.New(c), conn: k.conn, op: "collective"}
	same := len(send) > 0 && len(recv) > 0 && &send[0] == &recv[0]
	sref, sb, err := c.sharedRef(send, true)
	if err != nil {
		return false, err
	}
	var rref wire.Ref
	var rb *transport.Region
	if same && sb != nil {
		rref, rb = sref, nil
	} else if rref, rb, err = c.sharedRef(recv, false); err != nil {
		if sb != nil {
			c.bounces.put(sb)
		}
		return false, err
	}
	done := func() {
		if sb != nil {
			c.bounces.put(sb)
		}
		if rb != nil {
			c.bounces.put(rb)
		}
	}
	payload, _ := json.Marshal(wire.CollReq{Op: op, Send: sref, Recv: rref})
	if err := c.track(r); err != nil {
		done()
		return false, err
	}
	c.submit(wire.SQColl, 0, r.id, 0, payload)
	_, err = r.Wait(ctx)
	if errors.Is(err, wire.ErrDeclined) {
		done()
		return false, nil
	}
	if err == nil {
		switch {
		case same && sb != nil:
			copy(recv, sb.Bytes())
		case rb != nil:
			copy(recv, rb.Bytes())
		}
	}
	done()
	return err == nil, err
}

// sharedRef returns a reference to b in memory the plugin maps: b's own
// region, or a bounce buffer (with b copied in when in is set), which the
// caller puts back.
func (c *Client) sharedRef(b []byte, in bool) (wire.Ref, *transport.Region, error) {
	if len(b) == 0 {
		return wire.Ref{}, nil, nil
	}
	if reg, off, ok := transport.FindRegion(b); ok {
		if err := c.share(reg); err != nil {
			return wire.Ref{}, nil, err
		}
		return wire.Ref{Region: reg.ID(), Off: uint64(off), Len: uint64(len(b))}, nil, nil
	}
	bb, err := c.bounces.get(len(b))
	if err != nil {
		return wire.Ref{}, nil, err
	}
	if in {
		copy(bb.Bytes(), b)
	}
	return wire.Ref{Region: bb.ID(), Len: uint64(len(b))}, bb, nil
}
