package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/connbase"
	"github.com/gorun/gorun/internal/memreg"
	"github.com/gorun/gorun/internal/request"
	"github.com/gorun/gorun/internal/tagq"
	"github.com/gorun/gorun/transport"
)

// setup applies the socket options every stream uses.
func setup(c *net.TCPConn, peerTimeout time.Duration) {
	c.SetNoDelay(true)
	c.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable:   true,
		Idle:     peerTimeout / 2,
		Interval: peerTimeout / 6,
		Count:    3,
	})
	setUserTimeout(c, peerTimeout)
}

// lost turns a stream error into the connection's error.
func lost(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: closed by peer", transport.ErrPeerLost)
	}
	if errors.Is(err, transport.ErrProtocol) {
		return err
	}
	return fmt.Errorf("%w: %v", transport.ErrPeerLost, err)
}

// sendConn is the send side of a connection.
type sendConn struct {
	connbase.Base

	t      *Transport
	conns  []*net.TCPConn
	ws     []*writer
	eager  int
	maxReq int

	mu     sync.Mutex
	seq    uint64
	credit int
	sends  map[uint64]*sendReq // requests in flight by sequence number
	err    error               // why the connection ended; nil while it works
	closed bool                // Close was called
	free   request.FreeList[sendReq]

	dieOnce    sync.Once
	dead       chan struct{}
	readerDone chan struct{}
	closeOnce  sync.Once
	finished   chan struct{}
}

type sendReq struct {
	request.Request // kept when the request is reused (its Wait's channel)
	sendState
}

// sendState is what a send request holds besides its completion: made
// anew at each use.
type sendState struct {
	owner *sendConn
	seq   uint64
	buf   []byte
	mh    *memreg.Handle
	rdv   bool         // sent as RTS, waiting for CTS
	parts atomic.Int32 // writes still to finish
}

// Release takes back a request of this connection that its caller
// consumed (Test or Wait reported it done) and will not use again, to be
// reused by a later Isend. Other requests are left alone.
func (c *sendConn) Release(tr transport.Request) {
	if r, ok := tr.(*sendReq); ok && r.owner == c && r.Consumed() {
		r.sendState = sendState{}
		c.mu.Lock()
		c.free.Put(r)
		c.mu.Unlock()
	}
}

var _ transport.SendConn = (*sendConn)(nil)

func newSendConn(t *Transport, conns []*net.TCPConn, peer string) *sendConn {
	c := &sendConn{
		t: t, conns: conns,
		Base:  connbase.Base{Transport: t.name, PeerName: peer},
		eager: t.opts.EagerLimit, maxReq: t.opts.MaxRequests,
		credit:     eagerWindow,
		sends:      make(map[uint64]*sendReq),
		dead:       make(chan struct{}),
		readerDone: make(chan struct{}),
		finished:   make(chan struct{}),
	}
	for _, sc := range conns {
		setup(sc, t.opts.PeerTimeout)
		c.ws = append(c.ws, newWriter(sc, c.wrote, c.writeFailed))
	}
	return c
}

// Start starts the connection's writers, reader and monitor.
func (c *sendConn) Start() {
	for _, w := range c.ws {
		go w.run()
	}
	go c.read()
	go c.monitor()
}

// Isend implements transport.SendConn.
func (c *sendConn) Isend(buf []byte, tag uint64, mh transport.MemHandle) (transport.Request, error) {
	m, err := c.CheckMR(mh, buf)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, c.OpErr("isend", transport.ErrClosed)
	}
	if c.err != nil {
		err := c.OpErr("isend", c.err)
		c.mu.Unlock()
		return nil, err
	}
	if len(c.sends) >= c.maxReq {
		c.mu.Unlock()
		return nil, transport.ErrWouldBlock
	}
	c.seq++
	r := c.free.Get()
	r.sendState = sendState{owner: c, seq: c.seq, buf: buf, mh: m}
	r.Reset(nil)
	c.sends[r.seq] = r
	if m != nil {
		m.Uses.Add(1)
	}
	j := job{}
	if cost := len(buf) + eagerOverhead; len(buf) <= c.eager && cost <= c.credit {
		c.credit -= cost
		r.parts.Store(1)
		j.data, j.req = buf, r
		frame{fEager, tag, r.seq, uint64(len(buf))}.put(&j.hdr)
	} else {
		r.rdv = true
		frame{fRTS, tag, r.seq, uint64(len(buf))}.put(&j.hdr)
	}
	// An eager message on an idle stream is written by the caller: the
	// hand-over to the writer's goroutine costs more than the write.
	inline := j.req != nil && c.ws[0].reserve()
	if !inline {
		c.ws[0].push(j)
	}
	c.mu.Unlock()
	if inline {
		c.ws[0].writeReserved(j)
	}
	return r, nil
}

// wrote is called by a writer when one of r's writes is done.
func (c *sendConn) wrote(r *sendReq) {
	if r.parts.Add(-1) == 0 {
		c.complete(r)
	}
}

func (c *sendConn) complete(r *sendReq) {
	c.mu.Lock()
	_, ok := c.sends[r.seq]
	delete(c.sends, r.seq)
	c.mu.Unlock()
	if ok {
		if r.mh != nil {
			r.mh.Uses.Add(-1)
		}
		r.Complete(len(r.buf), nil)
	}
}

func (c *sendConn) writeFailed(err error) { c.die(lost(err)) }

// read handles what the receiver sends back: CTS and CREDIT.
func (c *sendConn) read() {
	defer close(c.readerDone)
	br := bufio.NewReaderSize(c.conns[0], 4096)
	var hb [frameSize]byte
	for {
		f, err := readFrame(br, &hb)
		if err == nil {
			switch f.typ {
			case fCTS:
				err = c.cts(f.a, f.b)
			case fCredit:
				c.mu.Lock()
				c.credit += int(min(f.a, eagerWindow))
				c.credit = min(c.credit, eagerWindow)
				c.mu.Unlock()
			default:
				err = fmt.Errorf("%w: unexpected frame %q from the receiver", transport.ErrProtocol, f.typ)
			}
		}
		if err != nil {
			c.die(lost(err))
			return
		}
	}
}

// cts starts sending the data of the message seq: limit bytes of it, cut
// into parts over the streams.
func (c *sendConn) cts(seq, limit uint64) error {
	c.mu.Lock()
	r := c.sends[seq]
	if r == nil || !r.rdv || limit > uint64(len(r.buf)) {
		c.mu.Unlock()
		return fmt.Errorf("%w: clear-to-send for unknown message %d", transport.ErrProtocol, seq)
	}
	r.rdv = false
	n := int(limit)
	parts := min(len(c.ws), max(1, n/minPart))
	if n == 0 {
		c.mu.Unlock()
		c.complete(r)
		return nil
	}
	r.parts.Store(int32(parts))
	first := int(seq % uint64(len(c.ws)))
	for i := range parts {
		off, end := i*n/parts, (i+1)*n/parts
		j := job{data: r.buf[off:end], req: r}
		frame{fData, seq, uint64(off), uint64(end - off)}.put(&j.hdr)
		c.ws[(first+i)%len(c.ws)].push(j)
	}
	c.mu.Unlock()
	return nil
}

func (c *sendConn) die(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.dieOnce.Do(func() { close(c.dead) })
}

// monitor tears the connection down once it died: it closes the streams,
// waits for every goroutine, then fails the requests still in flight.
func (c *sendConn) monitor() {
	<-c.dead
	closeAll(c.conns)
	for _, w := range c.ws {
		w.halt(0)
	}
	<-c.readerDone
	c.mu.Lock()
	sends := c.sends
	c.sends = map[uint64]*sendReq{}
	err := c.OpErr("isend", c.err)
	c.mu.Unlock()
	for _, r := range sends {
		if r.mh != nil {
			r.mh.Uses.Add(-1)
		}
		r.Complete(0, err)
	}
	c.t.conns.Remove(c)
	close(c.finished)
}

// Close stops sending (requests not yet written fail with ErrClosed), ends
// every stream with a FIN after the bytes already written, and waits a
// little for the receiver to see them.
func (c *sendConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		alive := c.err == nil
		if alive {
			c.err = transport.ErrClosed
		}
		c.closed = true
		c.mu.Unlock()
		if alive {
			for _, w := range c.ws {
				w.halt(linger)
			}
			for _, sc := range c.conns {
				sc.CloseWrite()
			}
			c.conns[0].SetReadDeadline(time.Now().Add(linger))
			<-c.readerDone
		}
		c.die(transport.ErrClosed)
	})
	<-c.finished
	return nil
}

// recvConn is the receive side of a connection.
type recvConn struct {
	connbase.Base

	t      *Transport
	conns  []*net.TCPConn
	w      *writer // stream 0's, for CTS and CREDIT
	maxReq int

	mu       sync.Mutex
	posted   tagq.Queues[*recvReq]
	unexp    tagq.Queues[*inbound]
	held     int                   // bytes (with overhead) of unexpected eager messages
	consumed int                   // eager bytes (with overhead) not yet credited back
	active   map[uint64]*recvReq   // receives whose data is coming, by sequence number
	pending  map[*recvReq]struct{} // every receive in flight
	free     request.FreeList[recvReq]
	spare    request.FreeList[inbound] // inbound records done with, for reuse
	live     int                       // readers that did not see the end yet
	err      error
	closed   bool // Close was called
	started  bool
	adopted  bool // each stream opens with a hello (AdoptRecv)

	dieOnce   sync.Once
	dead      chan struct{}
	readers   sync.WaitGroup
	closeOnce sync.Once
	finished  chan struct{}
}

type recvReq struct {
	request.Request // kept when the request is reused (its Wait's channel)
	recvState
}

// recvState is what a receive request holds besides its completion: made
// anew at each use.
type recvState struct {
	owner *recvConn
	buf   []byte
	mh    *memreg.Handle
	size  int // the message's size, once known
	want  int // bytes of it that will land in buf
	got   atomic.Int64
}

// Release takes back a request of this connection that its caller
// consumed (Test or Wait reported it done) and will not use again, to be
// reused by a later Irecv. Other requests are left alone.
func (c *recvConn) Release(tr transport.Request) {
	if r, ok := tr.(*recvReq); ok && r.owner == c && r.Consumed() {
		r.recvState = recvState{}
		c.mu.Lock()
		c.free.Put(r)
		c.mu.Unlock()
	}
}

// inbound is a message that arrived before its receive was posted.
type inbound struct {
	rts  bool
	seq  uint64
	size int
	data []byte // an eager message's bytes
}

var _ transport.RecvConn = (*recvConn)(nil)

func newRecvConn(t *Transport, conns []*net.TCPConn) *recvConn {
	c := &recvConn{
		t: t, conns: conns,
		Base:     connbase.Base{Transport: t.name, PeerName: conns[0].RemoteAddr().String()},
		maxReq:   t.opts.MaxRequests,
		active:   make(map[uint64]*recvReq),
		pending:  make(map[*recvReq]struct{}),
		dead:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	for _, sc := range conns {
		setup(sc, t.opts.PeerTimeout)
	}
	c.w = newWriter(conns[0], nil, func(err error) { c.die(lost(err)) })
	return c
}

// Start starts the connection's readers, writer and monitor, unless it
// was closed first.
func (c *recvConn) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.started = true
	c.live = len(c.conns)
	c.readers.Add(len(c.conns))
	for i := range c.conns {
		go c.read(i)
	}
	go c.w.run()
	go c.monitor()
}

// Irecv implements transport.RecvConn.
func (c *recvConn) Irecv(buf []byte, tag uint64, mh transport.MemHandle) (transport.Request, error) {
	m, err := c.CheckMR(mh, buf)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, c.OpErr("irecv", transport.ErrClosed)
	}
	if c.err != nil && !c.unexpEager(tag) {
		// Messages that arrived before the connection ended can still
		// be received.
		c.mu.Unlock()
		return nil, c.OpErr("irecv", c.err)
	}
	if len(c.pending) >= c.maxReq {
		c.mu.Unlock()
		return nil, transport.ErrWouldBlock
	}
	r := c.free.Get()
	r.recvState = recvState{owner: c, buf: buf, mh: m}
	r.Reset(nil)
	u, ok := c.unexp.Pop(tag)
	switch {
	case ok && !u.rts:
		c.held -= len(u.data) + eagerOverhead
		n, size := copy(buf, u.data), len(u.data)
		c.putInbound(u)
		c.mu.Unlock()
		c.credit(size)
		r.mh = nil
		r.SetDone(n, memreg.Truncated(c.t.name, size, n))
		return r, nil
	case ok:
		c.add(r)
		c.startRdv(r, u.seq, u.size)
		c.putInbound(u)
	default:
		c.add(r)
		c.posted.Push(tag, r)
	}
	c.mu.Unlock()
	return r, nil
}

// newInbound returns an inbound record, reused where one is spare, its
// data empty; c.mu must be held.
func (c *recvConn) newInbound() *inbound {
	u := c.spare.Get()
	*u = inbound{data: u.data[:0]}
	return u
}

// putInbound keeps an inbound record that was received, for reuse; c.mu
// must be held.
func (c *recvConn) putInbound(u *inbound) {
	if cap(u.data) <= c.t.opts.EagerLimit {
		c.spare.Put(u)
	}
}

// unexpEager reports whether the next unexpected message of tag is an
// eager one; c.mu must be held.
func (c *recvConn) unexpEager(tag uint64) bool {
	u, ok := c.unexp.Peek(tag)
	return ok && !u.rts
}

// add and finish track the receives in flight; c.mu must be held.
func (c *recvConn) add(r *recvReq) {
	c.pending[r] = struct{}{}
	if r.mh != nil {
		r.mh.Uses.Add(1)
	}
}

func (c *recvConn) finish(r *recvReq, n int, err error) {
	if _, ok := c.pending[r]; !ok {
		return
	}
	delete(c.pending, r)
	if r.mh != nil {
		r.mh.Uses.Add(-1)
	}
	r.Complete(n, err)
}

// startRdv answers the RTS of message seq, matched with r; c.mu must be
// held.
func (c *recvConn) startRdv(r *recvReq, seq uint64, size int) {
	r.size, r.want = size, min(size, len(r.buf))
	if r.want > 0 {
		c.active[seq] = r
	}
	var j job
	frame{fCTS, seq, uint64(r.want), 0}.put(&j.hdr)
	c.w.push(j)
	if r.want == 0 {
		c.finish(r, 0, memreg.Truncated(c.t.name, size, 0))
	}
}

// credit gives n eager bytes back to the sender, in batches.
func (c *recvConn) credit(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.consumed += n + eagerOverhead
	if c.consumed >= eagerWindow/4 {
		var j job
		frame{fCredit, uint64(c.consumed), 0, 0}.put(&j.hdr)
		c.w.push(j)
		c.consumed = 0
	}
}

func (c *recvConn) read(i int) {
	defer c.readers.Done()
	var rd io.Reader = c.conns[i]
	if i == 0 {
		rd = streamReader(c.conns[i], c.t.opts.Spin)
	}
	br := bufio.NewReaderSize(rd, 16<<10)
	if c.adopted {
		var b [helloSize]byte
		_, err := io.ReadFull(br, b[:])
		if err == nil {
			err = checkAdopted(b[:], i, len(c.conns))
		}
		if err != nil {
			c.die(lost(err))
			return
		}
	}
	var hb [frameSize]byte
	for {
		f, err := readFrame(br, &hb)
		if errors.Is(err, io.EOF) {
			c.mu.Lock()
			c.live--
			end := c.live == 0
			c.mu.Unlock()
			if end {
				c.die(lost(io.EOF))
			}
			return
		}
		if err == nil {
			switch {
			case f.typ == fData:
				err = c.data(br, f.a, f.b, f.c)
			case f.typ == fEager && i == 0:
				err = c.eager(br, f.a, f.b, f.c)
			case f.typ == fRTS && i == 0:
				err = c.rts(f.a, f.b, f.c)
			default:
				err = fmt.Errorf("%w: unexpected frame %q on stream %d", transport.ErrProtocol, f.typ, i)
			}
		}
		if err != nil {
			c.die(lost(err))
			return
		}
	}
}

func (c *recvConn) eager(br *bufio.Reader, tag, seq, size uint64) error {
	if size > eagerWindow {
		return fmt.Errorf("%w: eager message of %d bytes", transport.ErrProtocol, size)
	}
	n := int(size)
	c.mu.Lock()
	r, ok := c.posted.Pop(tag)
	var u *inbound
	if !ok {
		u = c.newInbound()
	}
	c.mu.Unlock()
	if !ok {
		u.seq, u.size = seq, n
		if cap(u.data) < n {
			u.data = make([]byte, n)
		}
		u.data = u.data[:n]
		if _, err := io.ReadFull(br, u.data); err != nil {
			return err
		}
		c.mu.Lock()
		if r, ok = c.posted.Pop(tag); !ok {
			c.held += n + eagerOverhead
			if c.held > eagerWindow+eagerOverhead {
				c.mu.Unlock()
				return fmt.Errorf("%w: the sender overran its eager credit", transport.ErrProtocol)
			}
			c.unexp.Push(tag, u)
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
	}
	got := min(n, len(r.buf))
	if u != nil {
		copy(r.buf, u.data)
		c.mu.Lock()
		c.putInbound(u)
		c.mu.Unlock()
	} else {
		if _, err := io.ReadFull(br, r.buf[:got]); err != nil {
			return err
		}
		if _, err := br.Discard(n - got); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.finish(r, got, memreg.Truncated(c.t.name, n, got))
	c.mu.Unlock()
	c.credit(n)
	return nil
}

func (c *recvConn) rts(tag, seq, size uint64) error {
	if size > 1<<48 {
		return fmt.Errorf("%w: message of %d bytes", transport.ErrProtocol, size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.posted.Pop(tag); ok {
		c.startRdv(r, seq, int(size))
	} else {
		u := c.newInbound()
		u.rts, u.seq, u.size = true, seq, int(size)
		c.unexp.Push(tag, u)
	}
	return nil
}

func (c *recvConn) data(br *bufio.Reader, seq, off, n uint64) error {
	c.mu.Lock()
	r := c.active[seq]
	c.mu.Unlock()
	if r == nil || off > uint64(r.want) || n > uint64(r.want)-off {
		return fmt.Errorf("%w: data for unknown message %d or out of its bounds", transport.ErrProtocol, seq)
	}
	if _, err := io.ReadFull(br, r.buf[off:off+n]); err != nil {
		return err
	}
	// Read before the Add: once another stream's part completes the
	// request, its user may reuse it (Release).
	want := int64(r.want)
	switch got := r.got.Add(int64(n)); {
	case got == want:
		c.mu.Lock()
		delete(c.active, seq)
		c.finish(r, r.want, memreg.Truncated(c.t.name, r.size, r.want))
		c.mu.Unlock()
	case got > want:
		return fmt.Errorf("%w: too much data for message %d", transport.ErrProtocol, seq)
	}
	return nil
}

func (c *recvConn) die(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.dieOnce.Do(func() { close(c.dead) })
}

func (c *recvConn) monitor() {
	<-c.dead
	closeAll(c.conns)
	c.w.halt(0)
	c.readers.Wait()
	c.mu.Lock()
	err := c.OpErr("irecv", c.err)
	for r := range c.pending {
		c.finish(r, 0, err)
	}
	c.posted.Drain(func(*recvReq) {})
	if c.closed {
		c.unexp.Drain(func(*inbound) {})
	}
	clear(c.active)
	c.mu.Unlock()
	c.t.conns.Remove(c)
	close(c.finished)
}

// Close closes the connection at once: the receives in flight fail with
// ErrClosed, and the sender's requests with ErrPeerLost.
func (c *recvConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		started := c.started
		if c.err == nil {
			c.err = transport.ErrClosed
		}
		c.closed = true
		c.mu.Unlock()
		c.die(transport.ErrClosed)
		if !started {
			closeAll(c.conns)
			close(c.finished)
		}
	})
	<-c.finished
	return nil
}
