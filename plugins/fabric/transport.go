package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/gorun/gorun/plugins/fabric/ofi"
	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/transport"
)

// Timing of the control plane.
const (
	// tickBusy and tickIdle are the periods of a transport's background
	// loop, which progresses the endpoint (so that a peer's connection
	// requests, heartbeats and rendezvous transfers move even when this
	// side's data path is idle) and handles control messages: tickBusy
	// while a Connect is waiting or control traffic was recent, tickIdle
	// otherwise.
	tickBusy = 1 * time.Millisecond
	tickIdle = 10 * time.Millisecond
	// heartbeatInterval is how often a transport tells each peer it shares
	// a connection with that it is alive.
	heartbeatInterval = 500 * time.Millisecond
	// lossDeadline is how long a peer with requests pending on its
	// connections may stay silent before they fail with ErrPeerLost. A
	// SIGKILLed peer says nothing: shm cannot notice it at all, and a
	// receive posted from any source (as data receives are) is not tied
	// to the tcp;ofi_rxm connection that drops, so heartbeats are what
	// detects it, for every provider.
	lossDeadline = 3 * time.Second
	// closeGrace bounds how long Close waits for its close messages to
	// leave, and a receive of a message sent before the peer closed its
	// side waits for it.
	closeGrace = 1 * time.Second
	drainGrace = 3 * time.Second
)

// transportImpl is the fabric transport of one rank: one libfabric
// endpoint (package ofi), opened on first use, that carries all its
// connections. Each connection is one-way and identified, on the endpoint
// that receives, by a connection id the receiver assigns; data messages use
// tags that encode the id and a per-connection sequence number (see
// dataTag), control messages (connection requests and answers, closes,
// heartbeats) one reserved tag. A background goroutine progresses the
// endpoint, handles control messages and sends heartbeats; the data path
// (Send, Recv, Test) only posts and tests libfabric operations.
type transportImpl struct {
	cfg    sdk.Config
	log    hclog.Logger
	choice choice
	infos  []ofi.Info
	// instance identifies this transport to its peers (random).
	instance uint64

	openMu  sync.Mutex
	opened  bool
	openErr error
	ep      *ofi.Endpoint
	name    []byte

	mu           sync.Mutex // the control state below
	closing      bool       // Close started: no new listeners or connections
	closed       bool
	peers        map[string]*peer // by endpoint name
	byInstance   map[uint64]*peer
	listeners    map[uint32]*listener
	nextListener uint32
	sendConns    map[uint32]*conn // by their local id
	recvConns    map[uint32]*conn // by the id this side assigned
	nextSend     uint32
	nextRecv     uint32
	connecting   map[uint32]chan ctrlMsg // Connects waiting, by local id
	ctrlRecvs    []*ctrlSlot
	ctrlSends    []ctrlSend
	lastHB       time.Time
	busyUntil    time.Time

	stop     chan struct{}
	loopDone chan struct{}
}

// peer is another transport's endpoint that this one shares connections
// with.
type peer struct {
	name     []byte
	addr     ofi.Addr
	label    string
	instance uint64 // 0 until known

	lastHeard atomic.Int64 // unix nanoseconds of its last control message
	pending   atomic.Int32 // data requests in flight on its connections
	lost      atomic.Bool
	lostWhy   atomic.Pointer[string]
	// gone: the peer's transport closed (msgBye); nothing may be sent to
	// it any more (with shm, a send to a closed peer in the same process
	// crashes inside the provider).
	gone atomic.Bool

	// Under transportImpl.mu:
	conns        int  // open connections with it
	byeAcked     bool // it answered our msgBye
	hb           *ofi.Request
	pendingSince time.Time
}

func (p *peer) markLost(why string) {
	if p.lost.Load() {
		return
	}
	p.lostWhy.Store(&why)
	p.lost.Store(true)
}

func (p *peer) lostErr() error {
	why := "peer lost"
	if w := p.lostWhy.Load(); w != nil {
		why = *w
	}
	return fmt.Errorf("fabric: peer %s: %s: %w", p.label, why, sdk.ErrPeerLost)
}

// newTransport makes the fabric transport of a rank. It picks the provider
// and domain (see choose) but opens the endpoint only on first use, so that
// listing devices needs no endpoint. When cfg.Iface is set and FI_TCP_IFACE
// is not, it sets FI_TCP_IFACE to cfg.Iface's first interface first:
// libfabric reads it once, at its first call.
func newTransport(cfg sdk.Config) (sdk.Transport, error) {
	if iface := firstIface(cfg.Iface); iface != "" && os.Getenv("FI_TCP_IFACE") == "" {
		os.Setenv("FI_TCP_IFACE", iface)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	infos, err := ofi.Providers("")
	if err != nil {
		return nil, fmt.Errorf("fabric: listing libfabric providers: %w", err)
	}
	c, err := choose(cfg, infos)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	t := &transportImpl{
		cfg:        cfg,
		log:        log,
		choice:     c,
		infos:      infos,
		instance:   binary.LittleEndian.Uint64(id[:]) | 1,
		peers:      map[string]*peer{},
		byInstance: map[uint64]*peer{},
		listeners:  map[uint32]*listener{},
		sendConns:  map[uint32]*conn{},
		recvConns:  map[uint32]*conn{},
		connecting: map[uint32]chan ctrlMsg{},
		stop:       make(chan struct{}),
		loopDone:   make(chan struct{}),
	}
	log.Debug("fabric transport", "provider", c.provider, "domain", c.domain, "why", c.why)
	return t, nil
}

// open opens the endpoint, posts the control receives and starts the
// background loop, once.
func (t *transportImpl) open() error {
	t.openMu.Lock()
	defer t.openMu.Unlock()
	if t.opened {
		return t.openErr
	}
	t.mu.Lock()
	closed := t.closing
	t.mu.Unlock()
	if closed {
		return fmt.Errorf("fabric: transport (provider %q): %w", t.choice.provider, sdk.ErrClosed)
	}
	t.opened = true
	ep, err := ofi.OpenDomain(t.choice.provider, t.choice.domain)
	if err != nil {
		t.openErr = fmt.Errorf("fabric: opening provider %q, domain %q: %w", t.choice.provider, t.choice.domain, err)
		close(t.loopDone)
		return t.openErr
	}
	name, err := ep.Name()
	if err == nil && len(name) > maxNameLen {
		err = fmt.Errorf("endpoint name of %d bytes does not fit a handle (%d at most)", len(name), maxNameLen)
	}
	if err != nil {
		ep.Close()
		t.openErr = fmt.Errorf("fabric: provider %q: %w", t.choice.provider, err)
		close(t.loopDone)
		return t.openErr
	}
	t.ep, t.name = ep, name
	t.mu.Lock()
	for i := 0; i < ctrlRecvCount; i++ {
		s := &ctrlSlot{}
		if err := t.postCtrlRecv(s); err != nil {
			t.mu.Unlock()
			ep.Close()
			t.openErr = err
			close(t.loopDone)
			return err
		}
		t.ctrlRecvs = append(t.ctrlRecvs, s)
	}
	t.mu.Unlock()
	t.log.Debug("fabric endpoint open", "provider", t.choice.provider, "domain", ep.Info().Domain, "name", nameLabel(t.choice.provider, name))
	go t.loop()
	return nil
}

// loop is the background goroutine: progress, control messages,
// heartbeats and peer-loss deadlines.
func (t *transportImpl) loop() {
	defer close(t.loopDone)
	timer := time.NewTimer(tickBusy)
	defer timer.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-timer.C:
		}
		busy := t.poll()
		if busy {
			timer.Reset(tickBusy)
		} else {
			timer.Reset(tickIdle)
		}
	}
}

// poll progresses the endpoint and does the control plane's work; it
// reports whether the control plane is busy (a Connect waiting, recent
// control traffic). Several goroutines may call it.
func (t *transportImpl) poll() bool {
	if _, err := t.ep.Progress(); err != nil {
		return false
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.ctrlDoneLocked(now)
	kept := t.ctrlSends[:0]
	for _, cs := range t.ctrlSends {
		done, _, err := cs.req.Status()
		if !done {
			kept = append(kept, cs)
			continue
		}
		if err != nil && cs.p != nil {
			cs.p.markLost(fmt.Sprintf("control message failed: %v", err))
		}
	}
	for i := len(kept); i < len(t.ctrlSends); i++ {
		t.ctrlSends[i] = ctrlSend{}
	}
	t.ctrlSends = kept
	hb := now.Sub(t.lastHB) >= heartbeatInterval
	if hb {
		t.lastHB = now
	}
	for _, p := range t.peers {
		if p.conns <= 0 || p.lost.Load() || p.gone.Load() {
			continue
		}
		if p.hb != nil {
			if done, _, err := p.hb.Status(); done {
				p.hb = nil
				if err != nil {
					p.markLost(fmt.Sprintf("heartbeat failed: %v", err))
					continue
				}
			}
		}
		if hb && p.hb == nil {
			msg := ctrlMsg{kind: msgHeartbeat, from: t.instance}
			if r, err := t.ep.Send(p.addr, ctrlTag, msg.encode(), nil); err == nil {
				p.hb = r
			} else {
				p.markLost(fmt.Sprintf("heartbeat failed: %v", err))
				continue
			}
		}
		if p.pending.Load() > 0 {
			if p.pendingSince.IsZero() {
				p.pendingSince = now
			}
			ref := time.Unix(0, p.lastHeard.Load())
			if p.pendingSince.After(ref) {
				ref = p.pendingSince
			}
			if silent := now.Sub(ref); silent > lossDeadline {
				p.markLost(fmt.Sprintf("silent for %v", silent.Round(time.Millisecond)))
			}
		} else {
			p.pendingSince = time.Time{}
		}
	}
	return len(t.connecting) > 0 || now.Before(t.busyUntil)
}

// ctrlDoneLocked handles the control messages received so far and reposts
// their receives; it does not progress the endpoint.
func (t *transportImpl) ctrlDoneLocked(now time.Time) {
	for _, s := range t.ctrlRecvs {
		if s.req == nil {
			continue
		}
		done, n, err := s.req.Status()
		if !done {
			continue
		}
		s.req = nil
		if err == nil {
			t.busyUntil = now.Add(100 * time.Millisecond)
			t.handleCtrl(s.buf[:n], now)
		} else {
			t.log.Debug("fabric control receive failed", "error", err)
		}
		if err := t.postCtrlRecv(s); err != nil {
			t.log.Warn("fabric control receive not reposted", "error", err)
		}
	}
}

// handleCtrlDone is ctrlDoneLocked for the data path: it handles the
// control messages that earlier progress has received.
func (t *transportImpl) handleCtrlDone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.ctrlDoneLocked(time.Now())
	}
}

// peerLocked returns the peer of endpoint name, inserting it into the
// address vector when it is new.
func (t *transportImpl) peerLocked(name []byte, instance uint64) (*peer, error) {
	p := t.peers[string(name)]
	if p != nil && (p.lost.Load() || p.gone.Load()) && instance != 0 && instance != p.instance {
		// A new transport at the address of a lost one.
		delete(t.byInstance, p.instance)
		p = nil
	}
	if p == nil {
		addr, err := t.ep.Insert(name)
		if err != nil {
			return nil, fmt.Errorf("fabric: peer %s: %w", nameLabel(t.choice.provider, name), err)
		}
		p = &peer{name: append([]byte(nil), name...), addr: addr, label: nameLabel(t.choice.provider, name)}
		p.lastHeard.Store(time.Now().UnixNano())
		t.peers[string(name)] = p
	}
	if instance != 0 && p.instance != instance {
		if p.instance != 0 {
			delete(t.byInstance, p.instance)
		}
		p.instance = instance
		t.byInstance[instance] = p
	}
	return p, nil
}

// sendCtrlLocked sends a control message to p and tracks it: its failure
// marks p lost.
func (t *transportImpl) sendCtrlLocked(p *peer, m ctrlMsg) {
	if p.gone.Load() || p.lost.Load() {
		return
	}
	m.from = t.instance
	r, err := t.ep.Send(p.addr, ctrlTag, m.encode(), nil)
	if err != nil {
		p.markLost(fmt.Sprintf("control message failed: %v", err))
		return
	}
	t.ctrlSends = append(t.ctrlSends, ctrlSend{req: r, p: p})
}

// handleCtrl acts on one control message.
func (t *transportImpl) handleCtrl(b []byte, now time.Time) {
	m, err := decodeCtrl(b)
	if err != nil {
		t.log.Debug("fabric: dropping a malformed control message", "error", err)
		return
	}
	p := t.byInstance[m.from]
	if p != nil {
		p.lastHeard.Store(now.UnixNano())
	}
	switch m.kind {
	case msgConnect:
		p, err := t.peerLocked(m.name, m.from)
		if err != nil {
			t.log.Warn("fabric: connection request from an unusable peer", "error", err)
			return
		}
		p.lastHeard.Store(now.UnixNano())
		l := t.listeners[m.a]
		if l == nil {
			t.sendCtrlLocked(p, ctrlMsg{kind: msgRefuse, a: m.b})
			return
		}
		id := t.newRecvIDLocked()
		c := &conn{t: t, ep: t.ep, p: p, localID: id, remoteID: m.b}
		t.recvConns[id] = c
		p.conns++
		l.push(c)
		t.sendCtrlLocked(p, ctrlMsg{kind: msgAccept, a: m.b, b: id})
	case msgAccept, msgRefuse:
		if ch := t.connecting[m.a]; ch != nil && p != nil {
			delete(t.connecting, m.a)
			ch <- m
		} else if m.kind == msgAccept && p != nil {
			// The Connect gave up: close its receive side.
			t.sendCtrlLocked(p, ctrlMsg{kind: msgCloseSend, a: m.b})
		}
	case msgCloseSend:
		if c := t.recvConns[m.a]; c != nil && c.p == p {
			c.peerClose(m.n, now)
		}
	case msgCloseRecv:
		if c := t.sendConns[m.a]; c != nil && c.p == p {
			c.peerClose(0, now)
		}
	case msgBye:
		if p != nil {
			t.sendCtrlLocked(p, ctrlMsg{kind: msgByeAck})
			p.gone.Store(true)
		}
	case msgByeAck:
		if p != nil {
			p.byeAcked = true
		}
	case msgHeartbeat:
	}
}

// newRecvIDLocked returns an unused receive connection id.
func (t *transportImpl) newRecvIDLocked() uint32 {
	for {
		t.nextRecv = (t.nextRecv + 1) & maxConnID
		if t.nextRecv == 0 {
			continue
		}
		if _, used := t.recvConns[t.nextRecv]; !used {
			return t.nextRecv
		}
	}
}

// Devices lists the providers and domains libfabric offers for reliable
// tagged messaging; Note is "selected" on the one this transport uses.
func (t *transportImpl) Devices(ctx context.Context) ([]sdk.Device, error) {
	var out []sdk.Device
	seen := map[[2]string]bool{}
	for _, in := range t.infos {
		k := [2]string{in.Provider, in.Domain}
		if seen[k] {
			continue
		}
		seen[k] = true
		d := sdk.Device{Name: in.Domain, Provider: in.Provider}
		sysfsDevice(&d)
		if in.Provider == t.choice.provider && in.Domain == t.choice.domain {
			d.Note = "selected"
		}
		out = append(out, d)
	}
	return out, nil
}

// Listen starts a listener; its handle names this endpoint and the
// listener.
func (t *transportImpl) Listen(ctx context.Context) (sdk.Listener, error) {
	if err := t.open(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return nil, fmt.Errorf("fabric: listen (provider %q): %w", t.choice.provider, sdk.ErrClosed)
	}
	t.nextListener++
	l := &listener{t: t, id: t.nextListener, notify: make(chan struct{}, 1), done: make(chan struct{})}
	l.handle = handle{provider: t.choice.provider, listener: l.id, instance: t.instance, name: t.name}.encode()
	t.listeners[l.id] = l
	return l, nil
}

// Connect opens a connection to the listener of handle: it sends a
// connection request with this endpoint's name on the control tag and waits
// for the peer's transport to answer with the connection's id.
func (t *transportImpl) Connect(ctx context.Context, hb []byte) (sdk.SendConn, error) {
	h, err := decodeHandle(hb)
	if err != nil {
		return nil, err
	}
	if h.provHash != provHash(t.choice.provider) {
		return nil, fmt.Errorf("fabric: handle of another libfabric provider than %q: %w", t.choice.provider, sdk.ErrBadHandle)
	}
	if err := t.open(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return nil, fmt.Errorf("fabric: connect (provider %q): %w", t.choice.provider, sdk.ErrClosed)
	}
	p, err := t.peerLocked(h.name, h.instance)
	if err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if p.lost.Load() {
		t.mu.Unlock()
		return nil, p.lostErr()
	}
	t.nextSend++
	id := t.nextSend
	ch := make(chan ctrlMsg, 1)
	t.connecting[id] = ch
	p.conns++ // heartbeats while connecting
	t.sendCtrlLocked(p, ctrlMsg{kind: msgConnect, a: h.listener, b: id, name: t.name})
	t.mu.Unlock()

	fail := func(err error) (sdk.SendConn, error) {
		t.mu.Lock()
		delete(t.connecting, id)
		p.conns--
		t.mu.Unlock()
		return nil, err
	}
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return fail(fmt.Errorf("fabric: connect to %s: %w", p.label, sdk.ErrClosed))
			}
			if m.kind == msgRefuse {
				return fail(fmt.Errorf("fabric: connect to %s: listener %d is closed or unknown: %w", p.label, h.listener, sdk.ErrPeerLost))
			}
			c := &conn{t: t, ep: t.ep, p: p, localID: id, remoteID: m.b, send: true}
			t.mu.Lock()
			if t.closing {
				t.mu.Unlock()
				return fail(fmt.Errorf("fabric: connect to %s: %w", p.label, sdk.ErrClosed))
			}
			t.sendConns[id] = c
			t.mu.Unlock()
			return c, nil
		case <-ctx.Done():
			return fail(fmt.Errorf("fabric: connect to %s: %w", p.label, ctx.Err()))
		case <-tick.C:
			t.poll()
			if p.lost.Load() {
				return fail(fmt.Errorf("fabric: connect: %w", p.lostErr()))
			}
			t.mu.Lock()
			closed := t.closing
			t.mu.Unlock()
			if closed {
				return fail(fmt.Errorf("fabric: connect to %s: %w", p.label, sdk.ErrClosed))
			}
		}
	}
}

// registration is the transport's record of registered memory.
type registration struct {
	mr  *ofi.MR
	mem []byte
	// external: mem is outside the Go heap, and sends and receives in it
	// are zero copy.
	external bool
}

// Register prepares mem for sends and receives. Memory outside the Go heap
// (the SDK's memfd mappings; see isExternal) is registered for zero copy
// (ofi.RegisterExternal: an fi_mr_reg when the provider needs FI_MR_LOCAL,
// a record otherwise). Go memory, which libfabric must not keep, gets ofi's
// staged registration, which copies.
func (t *transportImpl) Register(mem []byte) (sdk.Registration, error) {
	if err := t.open(); err != nil {
		return nil, err
	}
	if len(mem) == 0 {
		return &registration{}, nil
	}
	ext := isExternal(mem)
	var mr *ofi.MR
	var err error
	if ext {
		mr, err = t.ep.RegisterExternal(mem)
	} else {
		mr, err = t.ep.Register(mem)
	}
	if err != nil {
		return nil, fmt.Errorf("fabric: registering %d bytes (provider %q): %w", len(mem), t.choice.provider, err)
	}
	return &registration{mr: mr, mem: mem, external: ext}, nil
}

// Deregister releases a registration.
// ManualProgress implements sdk.Progresser: libfabric's tcp, shm, verbs
// and efa providers move data only when the endpoint is progressed, which
// Test does, so the SDK must keep testing while the rank waits.
func (t *transportImpl) ManualProgress() bool { return true }

var _ sdk.Progresser = (*transportImpl)(nil)

func (t *transportImpl) Deregister(r sdk.Registration) error {
	reg, ok := r.(*registration)
	if !ok || reg == nil {
		return fmt.Errorf("fabric: deregister: %T is not a registration of this transport", r)
	}
	if reg.mr == nil {
		return nil
	}
	if err := reg.mr.Close(); err != nil {
		return fmt.Errorf("fabric: deregister (provider %q): %w", t.choice.provider, err)
	}
	return nil
}

// Close closes every listener and connection, telling the peers, and the
// endpoint. Pending requests complete with ErrClosed. It says goodbye to
// every peer (msgBye) and waits, a second at most, for their answers, so
// that no peer sends to the endpoint after it is gone.
func (t *transportImpl) Close() error {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return nil
	}
	t.closing = true
	t.mu.Unlock()
	t.openMu.Lock() // wait for an open in progress
	opened := t.opened && t.openErr == nil
	t.openMu.Unlock()
	if !opened {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		return nil
	}
	t.mu.Lock()
	for _, l := range t.listeners {
		l.closeLocked()
	}
	for _, c := range t.sendConns {
		c.closed.Store(true)
		t.closeMsgLocked(c)
	}
	for _, c := range t.recvConns {
		c.closed.Store(true)
		t.closeMsgLocked(c)
	}
	for id, ch := range t.connecting {
		delete(t.connecting, id)
		close(ch)
	}
	var bye []*peer
	for _, p := range t.peers {
		if !p.gone.Load() && !p.lost.Load() {
			t.sendCtrlLocked(p, ctrlMsg{kind: msgBye})
			bye = append(bye, p)
		}
	}
	t.mu.Unlock()
	deadline := time.Now().Add(closeGrace)
	for time.Now().Before(deadline) {
		t.poll()
		t.mu.Lock()
		left := len(t.ctrlSends)
		for _, p := range bye {
			if !p.byeAcked && !p.gone.Load() && !p.lost.Load() {
				left++
			}
		}
		t.mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	close(t.stop)
	<-t.loopDone
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	if err := t.ep.Close(); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			// Sends that no peer will ever receive (their receiver
			// closed or went away) keep provider resources, such as
			// tcp;ofi_rxm's rendezvous registrations, that libfabric
			// cannot cancel; the domain stays allocated until the
			// process exits. Everything else is closed.
			t.log.Debug("fabric: endpoint closed with provider resources still held", "provider", t.choice.provider, "error", err)
			return nil
		}
		return fmt.Errorf("fabric: closing the endpoint (provider %q): %w", t.choice.provider, err)
	}
	return nil
}

// closeMsgLocked tells c's peer that this side closed c.
func (t *transportImpl) closeMsgLocked(c *conn) {
	if c.p.lost.Load() {
		return
	}
	if c.send {
		t.sendCtrlLocked(c.p, ctrlMsg{kind: msgCloseSend, a: c.remoteID, n: c.sentOK.Load()})
	} else {
		t.sendCtrlLocked(c.p, ctrlMsg{kind: msgCloseRecv, a: c.remoteID})
	}
}

// isExternal reports whether mem lies outside the Go heap: in a
// transport.Region of this process, or in a mapping of a file (a memfd
// shows as "/memfd:name (deleted)"), as /proc/self/maps tells. The Go heap
// is anonymous memory; memory that is anonymous but not Go's is treated
// as Go's, which is safe (ofi then copies).
func isExternal(mem []byte) bool {
	if _, _, ok := transport.FindRegion(mem); ok {
		return true
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	end := start + uintptr(len(mem)) - 1
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	okStart, okEnd := false, false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		path := strings.Join(fields[5:], " ")
		fileBacked := strings.HasPrefix(path, "/")
		if uint64(start) >= a && uint64(start) < b {
			okStart = fileBacked
		}
		if uint64(end) >= a && uint64(end) < b {
			okEnd = fileBacked
		}
	}
	return okStart && okEnd
}

// errOf maps an ofi error of an operation on the endpoint.
func (t *transportImpl) errOf(what string, p *peer, err error) error {
	if errors.Is(err, ofi.ErrClosed) {
		return fmt.Errorf("fabric: %s %s: %w", what, p.label, sdk.ErrClosed)
	}
	return fmt.Errorf("fabric: %s %s (provider %q): %w", what, p.label, t.choice.provider, err)
}
