package sdktest

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/peerproc"
	"github.com/gorun/gorun/plugins/sdk"
)

// envPeer, set to a test's name, makes the test binary the peer process of
// that test.
const envPeer = "GORUN_SDKTEST_PEER"

// peer is one process's end of a two-process test: a connection each way
// and a line-based control channel to the other process.
type peer struct {
	h   *harness
	tr  sdk.Transport
	sc  sdk.SendConn
	rc  sdk.RecvConn
	ctl *peerproc.Ctl
}

// link connects both ways with the other process: each side listens,
// passes its handle through the control channel as text and connects to
// the other's.
func (p *peer) link(t *testing.T) {
	t.Helper()
	l, hd := p.h.listen(p.tr)
	p.ctl.Say(t, "handle %x", hd)
	other, err := hex.DecodeString(p.ctl.Expect(t, "handle"))
	if err != nil {
		t.Fatalf("control channel: %v", err)
	}
	p.sc, p.rc = p.h.dial(p.tr, l, other)
}

// peerConfig is how process runs the peer process; opTimeout bounds the
// wait for each control line.
var peerConfig = peerproc.Config{
	Env:           envPeer,
	Args:          []string{"-test.timeout=3m"},
	ExitTimeout:   opTimeout,
	ExpectTimeout: opTimeout,
}

// process runs a two-process test: this process runs parent; the test
// binary, re-executed by peerproc with -test.run naming this test and
// envPeer set, runs inChild in the same test. Both sides make their
// Transport with newTransport.
func (s *suite) process(t *testing.T, parent func(*testing.T, *peer, *peerproc.Child), inChild func(*testing.T, *peer)) {
	if ctl, ok := peerproc.Attach(t, peerConfig); ok {
		p := &peer{h: newHarness(t), tr: s.transport(t), ctl: ctl}
		p.link(t)
		inChild(t, p)
		return
	}
	tr := s.transport(t)
	c := peerproc.Start(t, peerConfig)
	p := &peer{h: newHarness(t), tr: tr, ctl: c.Ctl}
	p.link(t)
	parent(t, p, c)
}

func (s *suite) testProcess(t *testing.T) {
	t.Run("Exchange", func(t *testing.T) { s.process(t, exchangeParent, exchangeChild) })
	t.Run("Kill", func(t *testing.T) { s.process(t, killParent, killChild) })
}

// regionMsg is the size of the message Exchange sends between registered
// memory.
const regionMsg = 4<<20 + 3

// exchangeParent ping-pongs small messages, then sends every message of
// sizes, each after a header with its length, for the child to echo while
// later ones are still in flight; last it receives a message the child
// sends from registered memory into registered memory.
func exchangeParent(t *testing.T, p *peer, c *peerproc.Child) {
	h := p.h
	ping, pong := make([]byte, 8), make([]byte, 8)
	for i := range 50 {
		binary.LittleEndian.PutUint64(ping, uint64(i))
		r := h.recv(p.rc, pong, nil, "pong "+itoa(i))
		h.ok(h.send(p.sc, ping, nil, "ping "+itoa(i)), 8)
		h.ok(r, 8)
		if got := binary.LittleEndian.Uint64(pong); got != uint64(i)+1 {
			t.Fatalf("pong %d carries %d, want %d", i, got, i+1)
		}
	}
	var sends []*op
	for i, n := range append(sizes, -1) {
		hdr := binary.LittleEndian.AppendUint64(nil, uint64(n))
		sends = append(sends, h.send(p.sc, hdr, nil, "header "+itoa(i)))
		if n >= 0 {
			src := make([]byte, n)
			fill(src, uint64(i))
			sends = append(sends, h.send(p.sc, src, nil, sizeName(n)+" to the other process"))
		}
	}
	for i, n := range sizes {
		dst := make([]byte, n)
		h.ok(h.recv(p.rc, dst, nil, "echo of "+sizeName(n)), n)
		if err := check(dst, uint64(i)); err != nil {
			t.Fatalf("echo of %s: %v", sizeName(n), err)
		}
	}
	for _, o := range sends {
		h.wait(o)
		if o.err != nil {
			t.Fatalf("%s: %v", o.what, o.err)
		}
	}
	mem := region(t, regionMsg)
	reg := h.register(p.tr, mem)
	h.ok(h.recv(p.rc, mem, reg, "message from registered memory"), regionMsg)
	if err := check(mem[:regionMsg], 77); err != nil {
		t.Fatalf("message from registered memory: %v", err)
	}
	h.deregister(p.tr, reg)
	p.ctl.Expect(t, "done")
	if err := c.Wait(); err != nil {
		t.Errorf("peer process: %v", err)
	}
}

func exchangeChild(t *testing.T, p *peer) {
	h := p.h
	buf := make([]byte, 8)
	for i := range 50 {
		h.ok(h.recv(p.rc, buf, nil, "ping "+itoa(i)), 8)
		binary.LittleEndian.PutUint64(buf, binary.LittleEndian.Uint64(buf)+1)
		h.ok(h.send(p.sc, buf, nil, "pong "+itoa(i)), 8)
	}
	var sends []*op
	var lens []int
	for {
		hdr := make([]byte, 8)
		h.ok(h.recv(p.rc, hdr, nil, "header"), 8)
		n := int64(binary.LittleEndian.Uint64(hdr))
		if n < 0 {
			break
		}
		b := make([]byte, n)
		h.ok(h.recv(p.rc, b, nil, "message of "+sizeName(int(n))), int(n))
		sends = append(sends, h.send(p.sc, b, nil, "echo of "+sizeName(int(n))))
		lens = append(lens, int(n))
	}
	for i, o := range sends {
		h.ok(o, lens[i])
	}
	mem := region(t, regionMsg)
	fill(mem[:regionMsg], 77)
	reg := h.register(p.tr, mem)
	h.ok(h.send(p.sc, mem[:regionMsg], reg, "message from registered memory"), regionMsg)
	h.deregister(p.tr, reg)
	p.ctl.Say(t, "done")
	p.ctl.Drain() // until the parent closes the channel
}

// killParent leaves a receive and a large send pending with the child,
// kills the child with SIGKILL, and wants both to fail with ErrPeerLost
// within LostWithin.
func killParent(t *testing.T, p *peer, c *peerproc.Child) {
	h := p.h
	p.ctl.Expect(t, "ready")
	r := h.recv(p.rc, make([]byte, 64), nil, "receive from a killed process")
	snd := h.send(p.sc, make([]byte, big), nil, "send of "+sizeName(big)+" to a killed process")
	if h.poll(20*time.Millisecond, r) {
		t.Fatalf("receive done (n = %d, err = %v) before the peer sent anything", r.n, r.err)
	}
	sendDone := snd.done
	start := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatalf("kill the peer process: %v", err)
	}
	h.fails(r, sdk.ErrPeerLost, start, LostWithin)
	if !sendDone {
		h.fails(snd, sdk.ErrPeerLost, start, LostWithin)
	}
}

func killChild(t *testing.T, p *peer) {
	p.ctl.Say(t, "ready")
	p.ctl.Drain() // killed while waiting here
}
