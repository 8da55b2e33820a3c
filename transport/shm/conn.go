//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/connbase"
	"github.com/gorun/gorun/internal/memreg"
	"github.com/gorun/gorun/internal/request"
	"github.com/gorun/gorun/internal/tagq"
	"github.com/gorun/gorun/transport"
)

// endpoint is what both sides of a connection share: the socket, the
// segment, the doorbells, the progress goroutine and the teardown.
type endpoint struct {
	connbase.Base // "shm", "pid N"

	t        *Transport
	op       string // "isend" or "irecv", for errors
	pid      int    // the peer's process, for process_vm_readv
	sock     *net.UnixConn
	seg      *segment
	bell     *doorbell
	peerBell int
	myFlag   *uint32
	peerFlag *uint32
	maxReq   int
	spin     time.Duration
	side     side

	mu      sync.Mutex
	err     error // why the connection ended; nil while it works
	closed  bool  // Close was called
	down    bool  // torn down: the segment is unmapped
	polling int   // Waits spinning on this side
	blocked int   // Waits parked on this side (request.Idler's Blocking)

	dieOnce   sync.Once
	dead      chan struct{}
	loops     sync.WaitGroup
	closeOnce sync.Once
	finished  chan struct{}
}

// side is what differs between the two sides; every method but sockMsg
// and peerGone runs with the endpoint's mu held.
type side interface {
	poll() bool
	flag() uint32
	busy() bool
	sockMsg(m sockMsg, fds []int) error
	peerGone()
	failAll(err error)
	release()
}

func newEndpoint(t *Transport, op string, sock *net.UnixConn, seg *segment, bell *doorbell, peerBell int, my, theirs int) endpoint {
	pid := peerPID(sock)
	return endpoint{
		t: t, op: op, pid: pid,
		Base: connbase.Base{Transport: "shm", PeerName: fmt.Sprintf("pid %d", pid)},
		sock: sock, seg: seg, bell: bell, peerBell: peerBell,
		myFlag: seg.u32(my), peerFlag: seg.u32(theirs),
		maxReq: t.opts.MaxRequests, spin: t.opts.Spin,
		dead: make(chan struct{}), finished: make(chan struct{}),
	}
}

// Start starts the connection's goroutines.
func (e *endpoint) Start() {
	e.loops.Add(2)
	go e.progress()
	go e.readSock()
	go e.monitor()
}

// usable returns the error for an operation on a connection that ended;
// e.mu must be held.
func (e *endpoint) usable(op string) error {
	switch {
	case e.closed:
		return e.OpErr(op, transport.ErrClosed)
	case e.err != nil:
		return e.OpErr(op, e.err)
	}
	return nil
}

// Poll, Spin, Polling and Parking make the endpoint a request.Poller.
func (e *endpoint) Poll() bool {
	if !e.mu.TryLock() {
		return false
	}
	defer e.mu.Unlock()
	if e.down {
		return false
	}
	worked := e.side.poll()
	e.settle()
	return worked
}

// Spin implements request.Poller: how long a Wait polls before it parks.
func (e *endpoint) Spin() time.Duration { return e.spin }

// Polling implements request.Poller: a Wait polls this side, so the peer need not ring.
func (e *endpoint) Polling() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.polling++
	if !e.down {
		atomic.StoreUint32(e.myFlag, 0) // the peer need not ring: we poll
	}
}

// Parking implements request.Poller: a Wait stops polling, and may park.
// Its caller does not say whether it parks, or when it resumes (request's
// and collectives' say, with request.Idler's methods): the side takes it
// for a Wait parked for good, and asks to be rung for everything from now
// on, as before there were idle sides.
func (e *endpoint) Parking() { e.change(-1, 1) }

// Idle implements request.Idler: a Wait stops polling without parking;
// arm the doorbell if it was the last.
func (e *endpoint) Idle() { e.change(-1, 0) }

// Blocking implements request.Idler: a Wait is about to park until its
// request completes; from now on the peer rings for everything.
func (e *endpoint) Blocking() { e.change(0, 1) }

// change counts Waits that start or stop polling and parking, and arms
// the doorbell for what the side then wants if none polls.
func (e *endpoint) change(polling, blocked int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.polling += polling
	e.blocked += blocked
	if e.polling == 0 && !e.down {
		e.arm()
		e.settle()
	}
}

// Unblocked implements request.Idler: a parked Wait resumed. The flag is
// left as it is (at worst a ring too many) until the next arm.
func (e *endpoint) Unblocked() {
	e.mu.Lock()
	e.blocked--
	e.mu.Unlock()
}

// settle makes sure that, when no Wait polls this side, what it still has
// to do gets done: the doorbell flag asks for what the side waits for, and
// work that needs no peer (a zero-copy receive's copy) is handed to the
// progress goroutine. e.mu must be held and the endpoint up.
func (e *endpoint) settle() {
	if e.polling > 0 {
		return
	}
	if v := atomic.LoadUint32(e.myFlag); v != 0 && v != e.want() {
		e.arm()
	}
	if e.side.busy() {
		e.bell.ring()
	}
}

// want is the doorbell flag while no Wait polls: what the side waits
// for, and with a Wait parked every publication (flagParked), else only
// those that need this side's progress (flagIdle). e.mu must be held.
func (e *endpoint) want() uint32 {
	f := e.side.flag()
	if e.blocked == 0 {
		f = f&^flagParked | flagIdle
	}
	return f
}

// arm asks the peer to ring from now on, then looks once more for what
// the peer published before it could see the flag; e.mu must be held.
func (e *endpoint) arm() bool {
	atomic.StoreUint32(e.myFlag, e.want())
	return e.side.poll()
}

// ringPeer rings the peer's doorbell if its flag has one of the bits in
// mask; e.mu must be held and the endpoint up.
func (e *endpoint) ringPeer(mask uint32) {
	v := atomic.LoadUint32(e.peerFlag)
	if v&mask != 0 && atomic.CompareAndSwapUint32(e.peerFlag, v, 0) {
		ringFD(e.peerBell)
	}
}

// progress is the side's goroutine: it makes progress when rung and
// sleeps otherwise.
func (e *endpoint) progress() {
	defer e.loops.Done()
	for {
		for {
			e.mu.Lock()
			if e.down || e.err != nil {
				e.mu.Unlock()
				return
			}
			worked := e.side.poll()
			if !worked && e.polling == 0 {
				worked = e.arm()
			}
			e.mu.Unlock()
			if !worked {
				break
			}
		}
		if err := e.bell.wait(); err != nil {
			return
		}
	}
}

// readSock reads the socket until it ends: setup messages while the
// connection lives, and at the end the news that the peer is gone.
func (e *endpoint) readSock() {
	defer e.loops.Done()
	for {
		m, fds, err := readMsg(e.sock)
		if err == nil {
			err = e.side.sockMsg(m, fds)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: closed by peer", transport.ErrPeerLost)
			} else if !errors.Is(err, transport.ErrProtocol) {
				err = fmt.Errorf("%w: %v", transport.ErrPeerLost, err)
			}
			e.side.peerGone()
			e.die(err)
			return
		}
	}
}

func (e *endpoint) die(err error) {
	e.mu.Lock()
	e.dieLocked(err)
	e.mu.Unlock()
}

func (e *endpoint) dieLocked(err error) {
	if e.err == nil {
		e.err = err
	}
	e.dieOnce.Do(func() { close(e.dead) })
}

// monitor tears the connection down once it died.
func (e *endpoint) monitor() {
	<-e.dead
	e.sock.Close()
	e.bell.close()
	e.loops.Wait()
	e.mu.Lock()
	e.down = true
	e.side.failAll(e.OpErr(e.op, e.err))
	e.seg.unmap()
	e.side.release()
	unix.Close(e.peerBell)
	e.peerBell = -1
	e.mu.Unlock()
	e.t.conns.Remove(e.closer())
	close(e.finished)
}

// closer is set by the sides so that the transport can untrack them.
func (e *endpoint) closer() io.Closer {
	if c, ok := e.side.(io.Closer); ok {
		return c
	}
	return nil
}

// Close implements transport.Conn.
func (e *endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.dieLocked(transport.ErrClosed)
		e.mu.Unlock()
	})
	<-e.finished
	return nil
}

// sendConn is the send side: it produces the data ring and consumes the
// control ring.
type sendConn struct {
	endpoint
	eager     int
	chunk     int
	consumed  *uint64 // the receiver's eager credit counter
	seq       uint64
	eagerSent uint64
	pending   map[uint64]*sendReq // every send in flight
	out       []*sendReq          // eager and RTS records waiting for room, in order
	rdv       map[uint64]*sendReq // RTS sent, waiting for CTS or FIN
	streaming []*sendReq          // CTS received, chunks to copy

	regMu  sync.Mutex     // one RegMR round trip at a time
	shared map[uint64]int // regions passed to the peer: registrations
	acks   chan sockMsg
	free   request.FreeList[sendReq] // requests handed back (Release), for reuse
}

type sendReq struct {
	request.Request // kept when the request is reused (its Wait's channel)
	sendState
}

// sendState is what a send request holds besides its completion: made
// anew at each use.
type sendState struct {
	owner    *sendConn
	seq, tag uint64
	buf      []byte
	mh       *memreg.Handle
	eager    bool
	zc       bool   // the receiver reads buf from the region
	region   uint64 // and where
	off      uint64
	cma      bool // the receiver reads buf from this process (process_vm_readv)
	limit    int  // bytes the receiver takes
	sent     int
}

var _ transport.SendConn = (*sendConn)(nil)

func newSendConn(t *Transport, sock *net.UnixConn, seg *segment, bell *doorbell, peerBell int) *sendConn {
	c := &sendConn{
		endpoint: newEndpoint(t, "isend", sock, seg, bell, peerBell, offSendFlag, offRecvFlag),
		eager:    t.opts.EagerLimit,
		chunk:    min(seg.data.MaxPayload(), streamChunk),
		consumed: seg.u64(offConsumed),
		pending:  make(map[uint64]*sendReq),
		rdv:      make(map[uint64]*sendReq),
		shared:   make(map[uint64]int),
		acks:     make(chan sockMsg, 1),
	}
	c.side = c
	return c
}

// RegMR implements transport.Conn. Memory inside a transport.Region is passed to the receiver (its memfd, once per region and connection), which maps it read-only and then copies messages straight out of it.
func (c *sendConn) RegMR(buf []byte) (transport.MemHandle, error) {
	m := c.NewMR(buf)
	reg, off, ok := transport.FindRegion(buf)
	if !ok {
		return m, nil
	}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.mu.Lock()
	if err := c.usable("regmr"); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	id := reg.ID()
	if n := c.shared[id]; n > 0 {
		c.shared[id] = n + 1
		c.mu.Unlock()
		m.Region, m.Off = reg, off
		return m, nil
	}
	c.mu.Unlock()
	// Pass the region's memfd and wait until the peer mapped it.
	if err := writeMsg(c.sock, sockMsg{typ: msgReg, a: id, b: uint64(reg.Len())}.marshal(), reg.FD()); err != nil {
		return nil, c.OpErr("regmr", fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
	}
	select {
	case a := <-c.acks:
		if a.a != id || a.status != statusOK {
			return nil, c.OpErr("regmr", fmt.Errorf("the peer could not map region %d", id))
		}
	case <-c.dead:
		c.mu.Lock()
		defer c.mu.Unlock()
		return nil, c.usable("regmr")
	case <-time.After(setupTimeout):
		return nil, c.OpErr("regmr", fmt.Errorf("no answer within %v", setupTimeout))
	}
	c.mu.Lock()
	c.shared[id]++
	c.mu.Unlock()
	m.Region, m.Off = reg, off
	return m, nil
}

// DeregMR implements transport.Conn.
func (c *sendConn) DeregMR(mh transport.MemHandle) error {
	m, err := c.ReleaseMR(mh)
	if err != nil || m.Region == nil {
		return err
	}
	id := m.Region.ID()
	c.mu.Lock()
	c.shared[id]--
	last := c.shared[id] == 0
	if last {
		delete(c.shared, id)
	}
	up := c.err == nil
	c.mu.Unlock()
	if last && up {
		writeMsg(c.sock, sockMsg{typ: msgDereg, a: id}.marshal())
	}
	return nil
}

// Isend implements transport.SendConn.
func (c *sendConn) Isend(buf []byte, tag uint64, mh transport.MemHandle) (transport.Request, error) {
	m, err := c.CheckMR(mh, buf)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable("isend"); err != nil {
		return nil, err
	}
	if len(c.pending) >= c.maxReq {
		return nil, transport.ErrWouldBlock
	}
	c.seq++
	r := c.newReq()
	r.seq, r.tag, r.buf, r.mh = c.seq, tag, buf, m
	cost := uint64(len(buf) + eagerOverhead)
	switch {
	case m != nil && m.Region != nil && len(buf) > c.eager:
		r.zc, r.region = true, m.Region.ID()
		r.off = uint64(m.Off) + uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))-uintptr(unsafe.Pointer(unsafe.SliceData(m.Buf))))
	case len(buf) > c.eager && c.t.opts.CMA:
		// One copy, by the receiver, straight from buf; it falls back to
		// asking for the ring (CTS) where the kernel does not let it.
		r.cma = true
	case len(buf) <= c.eager && c.eagerSent+cost-atomic.LoadUint64(c.consumed) <= eagerWindow:
		r.eager = true
		c.eagerSent += cost
		if len(c.out) == 0 && c.seg.data.Put(recEager, tag, r.seq, uint64(len(buf)), buf) {
			// Only a parked receiver is rung: an idle one finds the
			// message at its next poll.
			c.ringPeer(flagParked)
			r.mh = nil
			r.SetDone(len(buf), nil)
			return r, nil
		}
	}
	c.pending[r.seq] = r
	if m != nil {
		m.Uses.Add(1)
	}
	c.out = append(c.out, r)
	if !c.flush() || len(c.out) > 0 {
		// The ring is full: an idle receiver must make room.
		c.ringPeer(ringProgress)
	}
	c.settle()
	return r, nil
}

// newReq returns a pending request, reused where one was handed back;
// c.mu is held.
func (c *sendConn) newReq() *sendReq {
	r := c.free.Get()
	r.sendState = sendState{owner: c}
	r.Reset(c)
	return r
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

// flush copies the waiting eager and RTS records into the ring while
// there is room, and reports whether it did any.
func (c *sendConn) flush() bool {
	n, rdv := 0, false
	for _, r := range c.out {
		var ok bool
		switch {
		case r.eager:
			ok = c.seg.data.Put(recEager, r.tag, r.seq, uint64(len(r.buf)), r.buf)
		case r.zc:
			var p [16]byte
			binary.LittleEndian.PutUint64(p[0:], r.region)
			binary.LittleEndian.PutUint64(p[8:], r.off)
			ok = c.seg.data.Put(recRTS, r.tag, r.seq, uint64(len(r.buf)), p[:])
		case r.cma:
			var p [8]byte
			binary.LittleEndian.PutUint64(p[:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(r.buf)))))
			ok = c.seg.data.Put(recRTS, r.tag, r.seq, uint64(len(r.buf)), p[:])
		default:
			ok = c.seg.data.Put(recRTS, r.tag, r.seq, uint64(len(r.buf)), nil)
		}
		if !ok {
			break
		}
		n++
		if r.eager {
			c.complete(r)
		} else {
			c.rdv[r.seq] = r
			rdv = true
		}
	}
	if n == 0 {
		return false
	}
	clear(c.out[:n])
	c.out = c.out[n:]
	if rdv {
		c.ringPeer(ringProgress) // the receiver's progress moves it
	} else {
		c.ringPeer(flagParked)
	}
	return true
}

func (c *sendConn) complete(r *sendReq) {
	delete(c.pending, r.seq)
	if r.mh != nil {
		r.mh.Uses.Add(-1)
	}
	r.Complete(len(r.buf), nil)
}

func (c *sendConn) flag() uint32 {
	if len(c.out) > 0 || len(c.streaming) > 0 {
		return flagParked | flagWantSpace
	}
	return flagParked
}

// busy is false: all the sender waits for is the receiver (a record, or
// room in the ring), which rings when the flag asks.
func (c *sendConn) busy() bool { return false }

func (c *sendConn) poll() bool {
	worked := false
	for {
		x, ok, err := c.seg.ctrl.Next()
		if err == nil && ok {
			r := c.rdv[x.A]
			switch {
			case r == nil:
				err = fmt.Errorf("%w: answer for unknown message %d", transport.ErrProtocol, x.A)
			case x.Type == recCTS && !r.zc && x.B <= uint64(len(r.buf)):
				delete(c.rdv, x.A)
				r.cma = false // the receiver could not read it: stream it
				r.limit = int(x.B)
				if r.limit == 0 {
					c.complete(r)
				} else {
					c.streaming = append(c.streaming, r)
				}
			case x.Type == recFIN && (r.zc || r.cma):
				delete(c.rdv, x.A)
				c.complete(r)
			default:
				err = fmt.Errorf("%w: control record %d for message %d", transport.ErrProtocol, x.Type, x.A)
			}
		}
		if err != nil {
			c.dieLocked(err)
			return false
		}
		if !ok {
			break
		}
		c.seg.ctrl.Release(x)
		worked = true
	}
	if worked {
		c.ringPeer(flagWantSpace)
	}
	if c.flush() {
		worked = true
	}
	pushed := false
	for len(c.streaming) > 0 {
		r := c.streaming[0]
		n := min(c.chunk, r.limit-r.sent)
		if !c.seg.data.Put(recData, r.seq, uint64(r.sent), 0, r.buf[r.sent:r.sent+n]) {
			break
		}
		pushed = true
		r.sent += n
		if r.sent == r.limit {
			c.streaming[0] = nil
			c.streaming = c.streaming[1:]
			c.complete(r)
		}
	}
	if pushed {
		c.ringPeer(ringProgress)
		worked = true
	}
	return worked
}

func (c *sendConn) sockMsg(m sockMsg, fds []int) error {
	closeFDs(fds)
	if m.typ != msgRegAck {
		return fmt.Errorf("%w: setup message %q from the receiver", transport.ErrProtocol, m.typ)
	}
	select {
	case c.acks <- m:
	default:
	}
	return nil
}

func (c *sendConn) peerGone() {}

func (c *sendConn) failAll(err error) {
	for _, r := range c.pending {
		if r.mh != nil {
			r.mh.Uses.Add(-1)
		}
		r.Complete(0, err)
	}
	clear(c.pending)
	clear(c.rdv)
	c.out, c.streaming = nil, nil
}

func (c *sendConn) release() {}

// recvConn is the receive side: it consumes the data ring and produces the
// control ring.
type recvConn struct {
	endpoint
	consumed *uint64 // eager credit given back, in the segment
	credit   uint64
	posted   tagq.Queues[*recvReq]
	unexp    tagq.Queues[*inbound]
	held     int                       // bytes (with overhead) of unexpected eager messages
	active   map[uint64]*recvReq       // receives whose chunks are coming
	zjobs    []*recvReq                // zero-copy receives to copy
	ctrlOut  []rec                     // CTS and FIN waiting for room
	pending  map[*recvReq]struct{}     // every receive in flight
	regions  map[uint64][]byte         // the sender's regions, mapped read-only
	gone     bool                      // the sender is gone: deliver what is here
	kick     bool                      // something was published for the sender
	free     request.FreeList[recvReq] // requests handed back (Release), for reuse
	spare    request.FreeList[inbound] // inbound records done with, for reuse
}

type recvReq struct {
	request.Request // kept when the request is reused (its Wait's channel)
	recvState
}

// recvState is what a receive request holds besides its completion: made
// anew at each use.
type recvState struct {
	owner  *recvConn
	buf    []byte
	mh     *memreg.Handle
	seq    uint64
	size   int // the message's size
	want   int // the bytes of it that land in buf
	got    int
	region uint64 // zero copy: the region and the bytes to copy
	zsrc   []byte
	cma    uint64 // or the address of the bytes in the sender's process
}

// inbound is a message that arrived before its receive.
type inbound struct {
	rts    bool
	seq    uint64
	size   int
	data   []byte
	zc     bool
	region uint64
	off    uint64
	cma    uint64 // the sender's address of the message (process_vm_readv), 0: none
}

var _ transport.RecvConn = (*recvConn)(nil)

func newRecvConn(t *Transport, sock *net.UnixConn, seg *segment, bell *doorbell, peerBell int) *recvConn {
	c := &recvConn{
		endpoint: newEndpoint(t, "irecv", sock, seg, bell, peerBell, offRecvFlag, offSendFlag),
		consumed: seg.u64(offConsumed),
		active:   make(map[uint64]*recvReq),
		pending:  make(map[*recvReq]struct{}),
		regions:  make(map[uint64][]byte),
	}
	c.side = c
	return c
}

// Irecv implements transport.RecvConn.
func (c *recvConn) Irecv(buf []byte, tag uint64, mh transport.MemHandle) (transport.Request, error) {
	m, err := c.CheckMR(mh, buf)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable("irecv"); err != nil {
		// Messages that arrived before the connection ended can still
		// be received.
		if u, ok := c.unexp.Peek(tag); c.closed || !ok || u.rts {
			return nil, err
		}
	}
	if len(c.pending) >= c.maxReq {
		return nil, transport.ErrWouldBlock
	}
	if u, ok := c.unexp.Pop(tag); ok && !u.rts {
		c.held -= u.size + eagerOverhead
		n := copy(buf, u.data)
		c.consume(u.size)
		r := c.newReq()
		r.SetDone(n, memreg.Truncated("shm", u.size, n))
		c.putInbound(u)
		return r, nil
	} else if ok {
		r := c.add(buf, m)
		c.startRdv(r, u)
		c.putInbound(u)
		c.publish()
		c.settle()
		return r, nil
	}
	r := c.add(buf, m)
	c.posted.Push(tag, r)
	return r, nil
}

// newReq returns a pending request, reused where one was handed back;
// c.mu is held.
func (c *recvConn) newReq() *recvReq {
	r := c.free.Get()
	r.recvState = recvState{owner: c}
	r.Reset(c)
	return r
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

// newInbound returns an inbound record, reused where one is spare; c.mu
// is held.
func (c *recvConn) newInbound() *inbound {
	u := c.spare.Get()
	*u = inbound{data: u.data[:0]}
	return u
}

// putInbound keeps an inbound record that was received for reuse; c.mu
// is held.
func (c *recvConn) putInbound(u *inbound) {
	if cap(u.data) <= c.t.opts.EagerLimit {
		c.spare.Put(u)
	}
}

func (c *recvConn) add(buf []byte, m *memreg.Handle) *recvReq {
	r := c.newReq()
	r.buf, r.mh = buf, m
	c.pending[r] = struct{}{}
	if m != nil {
		m.Uses.Add(1)
	}
	return r
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

// consume gives eager credit back to the sender.
func (c *recvConn) consume(size int) {
	c.credit += uint64(size + eagerOverhead)
	if !c.down {
		atomic.StoreUint64(c.consumed, c.credit)
	}
}

// startRdv starts receiving the large message u into r.
func (c *recvConn) startRdv(r *recvReq, u *inbound) {
	r.seq, r.size, r.want = u.seq, u.size, min(u.size, len(r.buf))
	switch {
	case c.gone || c.down:
		c.finish(r, 0, c.OpErr("irecv", fmt.Errorf("%w: closed by peer before the message was sent", transport.ErrPeerLost)))
	case u.zc:
		src, ok := c.regions[u.region]
		if !ok || u.off > uint64(len(src)) || uint64(r.want) > uint64(len(src))-u.off {
			c.dieLocked(fmt.Errorf("%w: message %d is outside the sender's region %d", transport.ErrProtocol, u.seq, u.region))
			return
		}
		r.region, r.zsrc = u.region, src[u.off:u.off+uint64(r.want)]
		c.zjobs = append(c.zjobs, r)
	case u.cma != 0 && r.want > 0:
		r.cma = u.cma
		c.zjobs = append(c.zjobs, r)
	default:
		c.ctrl(recCTS, u.seq, uint64(r.want))
		if r.want == 0 {
			c.finish(r, 0, memreg.Truncated("shm", r.size, 0))
		} else {
			c.active[u.seq] = r
		}
	}
}

// readPeer copies len(dst) bytes at addr in the sender's process into dst
// with process_vm_readv: one copy, where the ring takes two.
func (c *recvConn) readPeer(dst []byte, addr uint64) error {
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}
	for done := 0; done < len(dst); {
		n, err := unix.ProcessVMReadv(c.pid, local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("process_vm_readv read %d bytes", n)
		}
		done += n
		if done == len(dst) {
			break
		}
		local[0].Base = &dst[done]
		local[0].SetLen(len(dst) - done)
		remote[0].Base += uintptr(n)
		remote[0].Len -= n
	}
	return nil
}

// ctrl sends a control record to the sender, or queues it.
func (c *recvConn) ctrl(typ uint32, a, b uint64) {
	if len(c.ctrlOut) == 0 && c.seg.ctrl.Put(typ, a, b, 0, nil) {
		c.kick = true
		return
	}
	c.ctrlOut = append(c.ctrlOut, rec{Type: typ, A: a, B: b})
}

// publish rings the sender if something was published for it.
func (c *recvConn) publish() {
	if c.kick && !c.down {
		c.kick = false
		c.ringPeer(ringProgress)
	}
}

// busy reports a zero-copy receive still to copy.
func (c *recvConn) busy() bool { return len(c.zjobs) > 0 }

func (c *recvConn) flag() uint32 {
	if len(c.ctrlOut) > 0 {
		return flagParked | flagWantSpace
	}
	return flagParked
}

// maxRecords bounds the records one poll takes.
const maxRecords = 64

func (c *recvConn) poll() bool {
	worked, released := false, false
	for range maxRecords {
		x, ok, err := c.seg.data.Next()
		if err == nil && ok {
			err = c.record(x)
		}
		if err != nil {
			c.dieLocked(err)
			return false
		}
		if !ok {
			break
		}
		c.seg.data.Release(x)
		worked, released = true, true
	}
	if len(c.zjobs) > 0 {
		worked = true
		r := c.zjobs[0]
		if c.gone {
			c.finish(r, 0, c.OpErr("irecv", fmt.Errorf("%w: closed by peer during the transfer", transport.ErrPeerLost)))
		} else {
			n := min(zcopyStep, r.want-r.got)
			if r.cma != 0 {
				if err := c.readPeer(r.buf[r.got:r.got+n], r.cma+uint64(r.got)); err != nil {
					if r.got > 0 {
						c.dieLocked(c.OpErr("irecv", fmt.Errorf("reading message %d from the sender: %w", r.seq, err)))
						return false
					}
					// The kernel does not let this process read the
					// sender's (another user, a container, ptrace
					// rules): have the message streamed through the ring.
					c.zjobs[0] = nil
					c.zjobs = c.zjobs[1:]
					r.cma = 0
					c.ctrl(recCTS, r.seq, uint64(r.want))
					c.active[r.seq] = r
					return true
				}
			} else {
				copy(r.buf[r.got:r.got+n], r.zsrc[r.got:r.got+n])
			}
			r.got += n
		}
		if !r.Pending() || r.got == r.want {
			c.zjobs[0] = nil
			c.zjobs = c.zjobs[1:]
			if r.Pending() {
				c.ctrl(recFIN, r.seq, 0)
				c.finish(r, r.want, memreg.Truncated("shm", r.size, r.want))
			}
		}
	}
	for len(c.ctrlOut) > 0 && c.seg.ctrl.Put(c.ctrlOut[0].Type, c.ctrlOut[0].A, c.ctrlOut[0].B, 0, nil) {
		c.ctrlOut = c.ctrlOut[1:]
		c.kick, worked = true, true
	}
	if c.kick {
		c.publish()
	} else if released {
		c.ringPeer(flagWantSpace)
	}
	return worked
}

// record handles one record of the data ring.
func (c *recvConn) record(x rec) error {
	switch x.Type {
	case recEager:
		tag, size := x.A, int(x.C)
		if size != len(x.Payload) {
			return fmt.Errorf("%w: eager record of %d bytes for a %d-byte message", transport.ErrProtocol, len(x.Payload), size)
		}
		if r, ok := c.posted.Pop(x.A); ok {
			n := copy(r.buf, x.Payload)
			c.finish(r, n, memreg.Truncated("shm", size, n))
			c.consume(size)
			return nil
		}
		c.held += size + eagerOverhead
		if c.held > eagerWindow+eagerOverhead {
			return fmt.Errorf("%w: the sender overran its eager credit", transport.ErrProtocol)
		}
		u := c.newInbound()
		u.seq, u.size, u.data = x.B, size, append(u.data, x.Payload...)
		c.unexp.Push(tag, u)
	case recRTS:
		u := c.newInbound()
		u.rts, u.seq, u.size = true, x.B, int(x.C)
		switch len(x.Payload) {
		case 0:
		case 16:
			u.zc = true
			u.region = binary.LittleEndian.Uint64(x.Payload[0:])
			u.off = binary.LittleEndian.Uint64(x.Payload[8:])
		case 8:
			u.cma = binary.LittleEndian.Uint64(x.Payload)
			if u.cma == 0 {
				return fmt.Errorf("%w: RTS record with a null address", transport.ErrProtocol)
			}
		default:
			return fmt.Errorf("%w: RTS record with %d bytes", transport.ErrProtocol, len(x.Payload))
		}
		if x.C > 1<<48 {
			return fmt.Errorf("%w: message of %d bytes", transport.ErrProtocol, x.C)
		}
		if r, ok := c.posted.Pop(x.A); ok {
			c.startRdv(r, u)
			c.putInbound(u)
		} else {
			c.unexp.Push(x.A, u)
		}
	case recData:
		r := c.active[x.A]
		if r == nil || x.B != uint64(r.got) || len(x.Payload) > r.want-r.got {
			return fmt.Errorf("%w: chunk at %d for message %d", transport.ErrProtocol, x.B, x.A)
		}
		r.got += copy(r.buf[r.got:], x.Payload)
		if r.got == r.want {
			delete(c.active, x.A)
			c.finish(r, r.want, memreg.Truncated("shm", r.size, r.want))
		}
	default:
		return fmt.Errorf("%w: data record of type %d", transport.ErrProtocol, x.Type)
	}
	return nil
}

func (c *recvConn) sockMsg(m sockMsg, fds []int) error {
	switch {
	case m.typ == msgReg && len(fds) == 1:
		status := byte(statusOK)
		mem, err := unix.Mmap(fds[0], 0, int(m.b), unix.PROT_READ, unix.MAP_SHARED)
		unix.Close(fds[0])
		if err != nil || m.b == 0 {
			status = statusNo
		} else {
			c.mu.Lock()
			if old := c.regions[m.a]; old != nil {
				unix.Munmap(old)
			}
			c.regions[m.a] = mem
			c.mu.Unlock()
		}
		return writeMsg(c.sock, sockMsg{typ: msgRegAck, a: m.a, status: status}.marshal())
	case m.typ == msgDereg && len(fds) == 0:
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.zjobs {
			if r.region == m.a {
				return fmt.Errorf("%w: region %d released during a transfer from it", transport.ErrProtocol, m.a)
			}
		}
		if mem := c.regions[m.a]; mem != nil {
			unix.Munmap(mem)
			delete(c.regions, m.a)
		}
		return nil
	}
	closeFDs(fds)
	return fmt.Errorf("%w: setup message %q from the sender", transport.ErrProtocol, m.typ)
}

// peerGone takes in what the sender left in the ring before it went.
func (c *recvConn) peerGone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down || c.closed {
		return
	}
	c.gone = true
	for c.poll() {
	}
}

func (c *recvConn) failAll(err error) {
	for r := range c.pending {
		c.finish(r, 0, err)
	}
	c.posted.Drain(func(*recvReq) {})
	if c.closed {
		c.unexp.Drain(func(*inbound) {})
	}
	clear(c.active)
	c.zjobs, c.ctrlOut = nil, nil
}

func (c *recvConn) release() {
	for id, mem := range c.regions {
		unix.Munmap(mem)
		delete(c.regions, id)
	}
}
