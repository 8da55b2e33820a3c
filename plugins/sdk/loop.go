package sdk

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/shmring"
	"github.com/gorun/gorun/internal/tagq"
	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
)

// The SDK's own header before every message between two plugin processes:
// kind, a magic byte, the tag and the message's length. A message up to
// wire.Inline bytes follows its header in the same transport message; a
// larger one is the next transport message, so that the receiver can post
// a buffer of exactly its length.
const (
	msgHdr    = 24
	msgMagic  = 0x47
	msgInline = 1
	msgLarge  = 2
	hdrBuf    = msgHdr + wire.Inline
)

// Spinning and backing off of the progress loop.
const (
	maxBackoff = 200 * time.Microsecond // longest sleep while transfers are in flight
)

// spinFor is how long the loop keeps polling after its last work before
// it sleeps. Short: on a machine with fewer cores than busy processes
// (measured on 2 vCPUs), a spinning plugin steals the time its rank and
// its own I/O need (50 us to 1 ms of spinning made a message's trip 1.5
// to 3 times slower).
const spinFor = 5 * time.Microsecond

const ()

// loop is the plugin's data plane: one goroutine that takes work requests
// from the submission ring, drives the author's transport, matches
// messages to receives, and posts completions.
type loop struct {
	name   string
	log    hclog.Logger
	seg    *wire.Segment
	bell   *wire.Bell // rung by the host
	host   *wire.Bell // rung by this loop
	tr     Transport
	coll   Collective
	memory Memory

	mu       sync.Mutex // guards what other goroutines add
	sends    map[uint64]*sendConn
	recvs    map[uint64]*recvConn
	regions  map[uint64]*region
	handoffs map[uint64][]*os.File // sockets of handed-off connections, until the host takes them
	fresh    []*recvConn
	nextID   uint64
	hasNew   atomic.Bool

	ops    []*op   // author requests in flight (loop only)
	cqOut  []cqRec // completions waiting for room in the ring
	posted bool    // completions posted since the host was last rung
	waker  *waker
	manual bool // the transport moves only when its requests are tested

	recvsPosted int // the rank's receives waiting for a message (loop only)
	hdrOps      int // header receives among ops
	quit        chan struct{}
	done        chan struct{}
	once        sync.Once
}

type op struct {
	req  Request
	done func(n int, err error)
}

type region struct {
	mem []byte
	reg Registration
}

type cqRec struct {
	id, n, status uint64
	payload       []byte
}

type sendConn struct {
	id uint64
	sc SendConn
}

type recvConn struct {
	id     uint64
	rc     RecvConn
	hdr    []byte
	posted tagq.Queues[*urecv]
	unexp  tagq.Queues[[]byte] // small messages without a receive yet
	wait   *large              // a large message without a receive yet
	err    error               // the connection failed
}

// large is a large message's header.
type large struct {
	tag  uint64
	size int
}

// urecv is a receive the rank posted.
type urecv struct {
	id     uint64
	tag    uint64
	dst    []byte // where the data goes, or nil for an inline receive
	reg    Registration
	inline bool
	cap    int // the rank's buffer size
}

// waker is Config.Wake: it rings the loop's doorbell when the loop
// sleeps.
type waker struct {
	sleeping atomic.Bool
	bell     *wire.Bell
}

func (w *waker) wake() {
	if w.sleeping.CompareAndSwap(true, false) {
		w.bell.Ring()
	}
}

func newLoop(name string, log hclog.Logger, seg *wire.Segment, bell, host *wire.Bell, tr Transport, coll Collective, mem Memory, w *waker) *loop {
	manual := false
	if p, ok := tr.(Progresser); ok {
		manual = p.ManualProgress()
	}
	return &loop{manual: manual,
		name: name, log: log, seg: seg, bell: bell, host: host, tr: tr, coll: coll, memory: mem, waker: w,
		sends: map[uint64]*sendConn{}, recvs: map[uint64]*recvConn{}, regions: map[uint64]*region{},
		handoffs: map[uint64][]*os.File{},
		quit:     make(chan struct{}), done: make(chan struct{}),
	}
}

func (l *loop) addSend(sc SendConn) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	l.sends[l.nextID] = &sendConn{id: l.nextID, sc: sc}
	return l.nextID
}

// addHandoff keeps the sockets of a handed-off connection until the host
// fetches them (RegionSockets) and returns the number it asks with.
func (l *loop) addHandoff(files []*os.File) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	l.handoffs[l.nextID] = files
	return l.nextID
}

// takeHandoff returns and forgets the sockets kept under id.
func (l *loop) takeHandoff(id uint64) []*os.File {
	l.mu.Lock()
	defer l.mu.Unlock()
	files := l.handoffs[id]
	delete(l.handoffs, id)
	return files
}

func (l *loop) addRecv(rc RecvConn) uint64 {
	l.mu.Lock()
	l.nextID++
	c := &recvConn{id: l.nextID, rc: rc, hdr: make([]byte, hdrBuf)}
	l.recvs[c.id] = c
	l.fresh = append(l.fresh, c)
	l.hasNew.Store(true)
	l.mu.Unlock()
	l.bell.Ring() // the loop posts the connection's first receive
	return c.id
}

func (l *loop) stop() {
	l.once.Do(func() {
		close(l.quit)
		l.bell.Ring()
	})
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		l.log.Warn("the data plane did not stop within 5s")
	}
	l.bell.Close()
	l.host.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.sends {
		c.sc.Close()
	}
	for _, c := range l.recvs {
		c.rc.Close()
	}
	for id, files := range l.handoffs {
		for _, f := range files {
			f.Close()
		}
		delete(l.handoffs, id)
	}
	for _, r := range l.regions {
		if l.tr != nil && r.reg != nil {
			l.tr.Deregister(r.reg)
		}
		unix.Munmap(r.mem)
	}
	l.regions = map[uint64]*region{}
	l.seg.Unmap()
}

func (l *loop) run() {
	defer close(l.done)
	last := time.Now()
	for {
		work := false
		if l.hasNew.Load() {
			l.takeFresh()
			work = true
		}
		for range 256 {
			x, ok, err := l.seg.In.Next()
			if err != nil {
				l.log.Error("submission ring", "error", err)
				return
			}
			if !ok {
				break
			}
			l.handle(x)
			l.seg.In.Release(x)
			work = true
		}
		if l.pollOps() {
			work = true
		}
		l.flush()
		select {
		case <-l.quit:
			return
		default:
		}
		if work {
			last = time.Now()
			continue
		}
		idle := time.Since(last)
		if idle < spinFor {
			runtime.Gosched()
			continue
		}
		if l.manual && l.waiting() {
			// A transport that moves only when tested is polled for as
			// long as the rank waits for something from it, giving the
			// CPU to any other process ready to run between polls (its
			// rank, which must run to use what arrives, most of all).
			osYield()
			continue
		}
		// Sleep on the doorbell, which the rank and the transport's
		// Wake ring; with transfers in flight, only until a deadline, to
		// poll the transport again.
		l.seg.Park()
		l.waker.sleeping.Store(true)
		if l.seg.In.Pending() || l.hasNew.Load() || l.pollOps() {
			l.waker.sleeping.Store(false)
			l.seg.Unpark()
			last = time.Now()
			continue
		}
		var d time.Duration
		if len(l.ops) > 0 || len(l.cqOut) > 0 {
			d = min(maxBackoff, idle/4)
		}
		err := l.bell.WaitFor(d)
		l.waker.sleeping.Store(false)
		l.seg.Unpark()
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // the bell closed: stop
		}
	}
}

// waiting reports whether the rank waits for something the transport
// must move: a receive it posted, or a transfer other than the idle
// receive of each connection's next header.
func (l *loop) waiting() bool { return l.recvsPosted > 0 || len(l.ops) > l.hdrOps }

func (l *loop) takeFresh() {
	l.mu.Lock()
	fresh := l.fresh
	l.fresh = nil
	l.hasNew.Store(false)
	l.mu.Unlock()
	for _, c := range fresh {
		l.postHdr(c)
	}
}

// pollOps tests every author request in flight and runs the completions.
func (l *loop) pollOps() bool {
	work := false
	for i := 0; i < len(l.ops); {
		o := l.ops[i]
		done, n, err := o.req.Test()
		if !done {
			i++
			continue
		}
		last := len(l.ops) - 1
		l.ops[i] = l.ops[last]
		l.ops[last] = nil
		l.ops = l.ops[:last]
		o.done(n, err)
		work = true
	}
	return work
}

// complete posts the completion of the rank's request id.
func (l *loop) complete(id uint64, n int, err error, payload []byte) {
	status := wire.StatusOf(err)
	if err != nil {
		payload = errText(err)
	}
	l.posted = true
	if len(l.cqOut) == 0 {
		if p, ok := l.seg.Out.Reserve(wire.CQDone, id, uint64(n), status, len(payload)); ok {
			copy(p, payload)
			l.seg.Out.Commit()
			return
		}
	}
	l.cqOut = append(l.cqOut, cqRec{id: id, n: uint64(n), status: status, payload: append([]byte(nil), payload...)})
}

// flush posts the completions that waited for room and rings the host if
// it sleeps.
func (l *loop) flush() {
	for len(l.cqOut) > 0 {
		c := l.cqOut[0]
		p, ok := l.seg.Out.Reserve(wire.CQDone, c.id, c.n, c.status, len(c.payload))
		if !ok {
			break
		}
		copy(p, c.payload)
		l.seg.Out.Commit()
		l.cqOut = l.cqOut[1:]
		l.posted = true
	}
	if l.posted {
		l.posted = false
		if l.seg.TheyParked() {
			l.host.Ring()
		}
	}
}

// mem resolves a reference to shared memory.
func (l *loop) mem(b []byte) ([]byte, Registration, error) {
	ref, err := wire.ParseRef(b)
	if err != nil {
		return nil, nil, err
	}
	return l.refMem(ref)
}

// refMem returns the shared memory ref names.
func (l *loop) refMem(ref wire.Ref) ([]byte, Registration, error) {
	l.mu.Lock()
	r := l.regions[ref.Region]
	l.mu.Unlock()
	if r == nil || ref.Off > uint64(len(r.mem)) || ref.Len > uint64(len(r.mem))-ref.Off {
		return nil, nil, fmt.Errorf("%w: memory %d+%d of region %d, which the plugin does not have", transport.ErrProtocol, ref.Off, ref.Len, ref.Region)
	}
	return r.mem[ref.Off : ref.Off+ref.Len], r.reg, nil
}

// handle carries out one work request.
func (l *loop) handle(x shmring.Rec) {
	switch x.Type {
	case wire.SQSendInline, wire.SQSendRef:
		l.mu.Lock()
		c := l.sends[x.A]
		l.mu.Unlock()
		if c == nil {
			l.complete(x.B, 0, fmt.Errorf("%w: no connection %d", ErrClosed, x.A), nil)
			return
		}
		if x.Type == wire.SQSendInline {
			l.sendInline(c, x.B, x.C, x.Payload)
			return
		}
		data, reg, err := l.mem(x.Payload)
		if err != nil {
			l.complete(x.B, 0, err, nil)
			return
		}
		l.sendLarge(c, x.B, x.C, data, reg)
	case wire.SQRecvInline, wire.SQRecvRef:
		l.mu.Lock()
		c := l.recvs[x.A]
		l.mu.Unlock()
		if c == nil {
			l.complete(x.B, 0, fmt.Errorf("%w: no connection %d", ErrClosed, x.A), nil)
			return
		}
		u := &urecv{id: x.B, tag: x.C}
		if x.Type == wire.SQRecvInline {
			if len(x.Payload) != 8 {
				l.complete(x.B, 0, fmt.Errorf("%w: inline receive record", transport.ErrProtocol), nil)
				return
			}
			u.inline, u.cap = true, int(binary.LittleEndian.Uint64(x.Payload))
		} else {
			dst, reg, err := l.mem(x.Payload)
			if err != nil {
				l.complete(x.B, 0, err, nil)
				return
			}
			u.dst, u.reg, u.cap = dst, reg, len(dst)
		}
		l.recv(c, u)
	case wire.SQCloseConn:
		l.closeConn(x.A)
		l.complete(x.B, 0, nil, nil)
	case wire.SQColl:
		l.collective(x.B, x.Payload)
	case wire.SQDev:
		l.device(x.B, x.Payload)
	default:
		l.log.Error("unknown work request", "type", x.Type)
		l.complete(x.B, 0, fmt.Errorf("%w: work request of type %d", transport.ErrProtocol, x.Type), nil)
	}
}

func putHdr(b []byte, kind byte, tag uint64, size int) {
	b[0], b[1] = kind, msgMagic
	binary.LittleEndian.PutUint64(b[8:], tag)
	binary.LittleEndian.PutUint64(b[16:], uint64(size))
}

func (l *loop) sendInline(c *sendConn, id, tag uint64, data []byte) {
	buf := make([]byte, msgHdr+len(data))
	putHdr(buf, msgInline, tag, len(data))
	copy(buf[msgHdr:], data)
	req, err := c.sc.Send(buf, nil)
	if err != nil {
		l.complete(id, 0, err, nil)
		return
	}
	n := len(data)
	l.ops = append(l.ops, &op{req: req, done: func(_ int, err error) { l.complete(id, n, err, nil) }})
}

func (l *loop) sendLarge(c *sendConn, id, tag uint64, data []byte, reg Registration) {
	hdr := make([]byte, msgHdr)
	putHdr(hdr, msgLarge, tag, len(data))
	h, err := c.sc.Send(hdr, nil)
	if err != nil {
		l.complete(id, 0, err, nil)
		return
	}
	d, err := c.sc.Send(data, reg)
	if err != nil {
		// The header is out: the receiver waits for data that will not
		// come, so the connection is unusable; close it.
		c.sc.Close()
		l.complete(id, 0, err, nil)
		l.ops = append(l.ops, &op{req: h, done: func(int, error) {}})
		return
	}
	// Both parts must be done; the data's completion is the request's,
	// unless the header failed.
	var herr error
	pending := 2
	finish := func() {
		if pending--; pending == 0 {
			l.complete(id, len(data), herr, nil)
		}
	}
	l.ops = append(l.ops,
		&op{req: h, done: func(_ int, err error) { herr = err; finish() }},
		&op{req: d, done: func(_ int, err error) {
			if herr == nil {
				herr = err
			}
			finish()
		}})
}

// postHdr posts the receive of c's next message header.
func (l *loop) postHdr(c *recvConn) {
	if c.err != nil {
		return
	}
	req, err := c.rc.Recv(c.hdr, nil)
	if err != nil {
		l.failRecv(c, err)
		return
	}
	l.hdrOps++
	l.ops = append(l.ops, &op{req: req, done: func(n int, err error) { l.hdrOps--; l.onHdr(c, n, err) }})
}

func (l *loop) onHdr(c *recvConn, n int, err error) {
	if err != nil {
		l.failRecv(c, err)
		return
	}
	if n < msgHdr || c.hdr[1] != msgMagic {
		l.failRecv(c, fmt.Errorf("%w: message header of %d bytes from %s", transport.ErrProtocol, n, c.rc.Peer()))
		return
	}
	tag := binary.LittleEndian.Uint64(c.hdr[8:])
	size := binary.LittleEndian.Uint64(c.hdr[16:])
	switch c.hdr[0] {
	case msgInline:
		if size != uint64(n-msgHdr) {
			l.failRecv(c, fmt.Errorf("%w: %d-byte message with %d bytes", transport.ErrProtocol, size, n-msgHdr))
			return
		}
		data := c.hdr[msgHdr:n]
		if u, ok := c.posted.Pop(tag); ok {
			l.recvsPosted--
			l.deliver(u, data)
		} else {
			c.unexp.Push(tag, append([]byte(nil), data...))
		}
		l.postHdr(c)
	case msgLarge:
		if size > 1<<48 {
			l.failRecv(c, fmt.Errorf("%w: message of %d bytes", transport.ErrProtocol, size))
			return
		}
		m := &large{tag: tag, size: int(size)}
		if u, ok := c.posted.Pop(tag); ok {
			l.recvsPosted--
			l.startData(c, u, m)
		} else {
			c.wait = m // the sender's next messages wait until the rank posts a receive for this one
		}
	default:
		l.failRecv(c, fmt.Errorf("%w: message kind %d", transport.ErrProtocol, c.hdr[0]))
	}
}

// deliver completes u with a small message.
func (l *loop) deliver(u *urecv, data []byte) {
	n := min(len(data), u.cap)
	var err error
	if len(data) > u.cap {
		err = fmt.Errorf("%w: %d-byte message, %d-byte buffer", transport.ErrTruncated, len(data), u.cap)
	}
	if u.inline {
		if err != nil {
			// The error text takes the payload's place: send the data
			// first as a plain completion is not possible, so the rank
			// gets the prefix through a second path.
			l.completeTrunc(u.id, data[:n], err)
			return
		}
		l.complete(u.id, n, nil, data[:n])
		return
	}
	copy(u.dst, data[:n])
	l.complete(u.id, n, err, nil)
}

// completeTrunc completes an inline receive that truncated: its payload
// is the data's prefix and the status says truncated (no error text).
func (l *loop) completeTrunc(id uint64, data []byte, _ error) {
	l.posted = true
	if len(l.cqOut) == 0 {
		if p, ok := l.seg.Out.Reserve(wire.CQDone, id, uint64(len(data)), wire.StatusTruncated, len(data)); ok {
			copy(p, data)
			l.seg.Out.Commit()
			return
		}
	}
	l.cqOut = append(l.cqOut, cqRec{id: id, n: uint64(len(data)), status: wire.StatusTruncated, payload: append([]byte(nil), data...)})
}

// startData receives the large message m into u's buffer (or, when it is
// too long for it or u is inline, into a temporary one).
func (l *loop) startData(c *recvConn, u *urecv, m *large) {
	dst, reg := u.dst, u.reg
	tmp := u.inline || m.size > len(u.dst)
	if tmp {
		dst, reg = make([]byte, m.size), nil
	} else {
		dst = dst[:m.size]
	}
	req, err := c.rc.Recv(dst, reg)
	if err != nil {
		l.complete(u.id, 0, err, nil)
		l.failRecv(c, err)
		return
	}
	l.ops = append(l.ops, &op{req: req, done: func(n int, err error) {
		switch {
		case err != nil:
			l.complete(u.id, 0, err, nil)
			l.failRecv(c, err)
			return
		case n != m.size:
			err = fmt.Errorf("%w: %d of a %d-byte message arrived", transport.ErrProtocol, n, m.size)
			l.complete(u.id, 0, err, nil)
			l.failRecv(c, err)
			return
		case tmp:
			l.deliver(u, dst)
		default:
			l.complete(u.id, n, nil, nil)
		}
		l.postHdr(c)
	}})
}

// recv matches a receive the rank posted.
func (l *loop) recv(c *recvConn, u *urecv) {
	if data, ok := c.unexp.Pop(u.tag); ok {
		l.deliver(u, data)
		return
	}
	if c.wait != nil && c.wait.tag == u.tag {
		if _, earlier := c.posted.Peek(u.tag); !earlier {
			m := c.wait
			c.wait = nil
			l.startData(c, u, m)
			return
		}
	}
	if c.err != nil {
		l.complete(u.id, 0, c.err, nil)
		return
	}
	c.posted.Push(u.tag, u)
	l.recvsPosted++
}

// failRecv fails c's posted receives with err; later ones fail too, once
// the messages that arrived before are taken.
func (l *loop) failRecv(c *recvConn, err error) {
	if c.err != nil {
		return
	}
	c.err = err
	c.posted.Drain(func(u *urecv) { l.recvsPosted--; l.complete(u.id, 0, err, nil) })
}

func (l *loop) closeConn(id uint64) {
	l.mu.Lock()
	s := l.sends[id]
	r := l.recvs[id]
	delete(l.sends, id)
	delete(l.recvs, id)
	l.mu.Unlock()
	if s != nil {
		s.sc.Close()
	}
	if r != nil {
		l.failRecv(r, fmt.Errorf("%w: connection closed", ErrClosed))
		r.rc.Close()
	}
}

func (l *loop) collective(id uint64, payload []byte) {
	var req wire.CollReq
	if err := json.Unmarshal(payload, &req); err != nil {
		l.complete(id, 0, fmt.Errorf("%w: collective request: %v", transport.ErrProtocol, err), nil)
		return
	}
	if l.coll == nil {
		l.complete(id, 0, wire.ErrDeclined, nil)
		return
	}
	send, _, err := l.mem(payload2(req.Send))
	if err == nil {
		var recv []byte
		recv, _, err = l.mem(payload2(req.Recv))
		if err == nil {
			var r Request
			r, err = l.coll.Start(Op(req.Op), send, recv)
			if err == nil {
				l.ops = append(l.ops, &op{req: r, done: func(n int, err error) { l.complete(id, n, err, nil) }})
				return
			}
		}
	}
	if err == ErrDeclined {
		err = wire.ErrDeclined
	}
	l.complete(id, 0, err, nil)
}

func payload2(r wire.Ref) []byte {
	b := make([]byte, wire.RefSize)
	r.Put(b)
	return b
}

// serveRegions maps the memory the host shares, one region per message,
// and hands over the sockets of handed-off connections, answering each
// request.
func (l *loop) serveRegions(sock *net.UnixConn) {
	defer sock.Close()
	for {
		m, fds, err := wire.RecvRegion(sock)
		if err != nil {
			return
		}
		if m.Status == wire.RegionSockets {
			for _, fd := range fds {
				unix.Close(fd)
			}
			if !l.sendSockets(sock, m.ID) {
				return
			}
			continue
		}
		for _, fd := range fds[min(1, len(fds)):] {
			unix.Close(fd)
		}
		status := uint64(0)
		if len(fds) == 0 || m.Size == 0 || m.Status != wire.RegionMap {
			status = 1
			l.log.Error("region without memory", "region", m.ID)
		} else {
			fd := fds[0]
			mem, err := unix.Mmap(fd, 0, int(m.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			unix.Close(fd)
			var reg Registration
			if err == nil && l.tr != nil {
				if reg, err = l.tr.Register(mem); err != nil {
					unix.Munmap(mem)
				}
			}
			if err != nil {
				status = 1
				l.log.Error("mapping a region", "region", m.ID, "bytes", m.Size, "error", err)
			} else {
				l.mu.Lock()
				l.regions[m.ID] = &region{mem: mem, reg: reg}
				l.mu.Unlock()
			}
		}
		if err := wire.SendRegion(sock, wire.RegionMsg{ID: m.ID, Status: status}); err != nil {
			return
		}
	}
}

// sendSockets answers the host's request for the sockets of handed-off
// connection id: with them attached, or Status 1 when there are none. It
// reports whether the socket still works.
func (l *loop) sendSockets(sock *net.UnixConn, id uint64) bool {
	files := l.takeHandoff(id)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) == 0 {
		l.log.Error("the host asked for the sockets of an unknown connection", "connection", id)
		return wire.SendRegion(sock, wire.RegionMsg{ID: id, Status: 1}) == nil
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	return wire.SendRegion(sock, wire.RegionMsg{ID: id, Size: uint64(len(fds))}, fds...) == nil
}
