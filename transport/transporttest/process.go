package transporttest

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/peerproc"
	"github.com/gorun/gorun/transport"
)

// envPeer, set to a test's name, makes the test binary the peer process of
// that test.
const envPeer = "GORUN_TRANSPORTTEST_PEER"

// peer is one process's end of a two-process test: a connection each way
// and a line-based control channel to the other process.
type peer struct {
	sc  transport.SendConn
	rc  transport.RecvConn
	ctl *peerproc.Ctl
}

// link connects both ways with the other process through the control
// channel.
func (p *peer) link(t *testing.T, tr transport.Transport) {
	t.Helper()
	ctx := ctxFor(t, opTimeout)
	l, err := tr.Listen(ctx)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	p.ctl.Say(t, "handle %x", []byte(l.Handle()))
	h, err := hex.DecodeString(p.ctl.Expect(t, "handle"))
	if err != nil {
		t.Fatalf("control channel: %v", err)
	}
	acc := make(chan error, 1)
	go func() {
		var err error
		p.rc, err = l.Accept(ctx)
		acc <- err
	}()
	if p.sc, err = tr.Connect(ctx, h); err != nil {
		t.Fatalf("Connect to the other process: %v", err)
	}
	if err := <-acc; err != nil {
		t.Fatalf("Accept from the other process: %v", err)
	}
	t.Cleanup(func() { closeConn(t, p.sc); closeConn(t, p.rc) })
}

// peerConfig is how process runs the peer process. Control lines have no
// time limit of their own: -test.timeout bounds the peer.
func peerConfig() peerproc.Config {
	args := []string{"-test.timeout=2m"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	return peerproc.Config{Env: envPeer, Args: args, ExitTimeout: opTimeout}
}

// process runs a two-process test: this process runs parent; the test
// binary, re-executed by peerproc, runs inChild in the same test.
func (s *suite) process(t *testing.T, parent func(*testing.T, *peer, *peerproc.Child), inChild func(*testing.T, *peer)) {
	if ctl, ok := peerproc.Attach(t, peerConfig()); ok {
		p := &peer{ctl: ctl}
		p.link(t, s.transport(t))
		inChild(t, p)
		return
	}
	t.Parallel()
	tr := s.transport(t)
	c := peerproc.Start(t, peerConfig())
	p := &peer{ctl: c.Ctl}
	p.link(t, tr)
	parent(t, p, c)
}

func (s *suite) testProcess(t *testing.T) {
	t.Run("Exchange", func(t *testing.T) { s.process(t, exchangeParent, exchangeChild) })
	t.Run("Kill", func(t *testing.T) { s.process(t, killParent, killChild) })
}

// regionMsg is the size of the message Exchange sends between Regions.
const regionMsg = 8<<20 + 3

// exchangeSizes are the messages the parent sends for the child to echo.
func exchangeSizes() []int {
	sizes := []int{0, 1, 8, 4093, 100 << 10, 1<<20 + 3, 8 << 20}
	if !testing.Short() {
		sizes = append(sizes, big)
	}
	return sizes
}

// exchangeParent ping-pongs small messages, then has every message of
// exchangeSizes in flight to the child while the child echoes them back.
func exchangeParent(t *testing.T, p *peer, c *peerproc.Child) {
	ping, pong := make([]byte, 8), make([]byte, 8)
	for i := range 100 {
		binary.LittleEndian.PutUint64(ping, uint64(i))
		r := irecv(t, p.rc, pong, 9, nil)
		mustWait(t, "ping", isend(t, p.sc, ping, 9, nil), 8)
		mustWait(t, "pong", r, 8)
		if got := binary.LittleEndian.Uint64(pong); got != uint64(i)+1 {
			t.Fatalf("pong %d carries %d", i, got)
		}
	}
	sizes := exchangeSizes()
	var reqs []transport.Request
	dsts := make([][]byte, len(sizes))
	for i, n := range sizes {
		dsts[i] = make([]byte, n)
		reqs = append(reqs, irecv(t, p.rc, dsts[i], 2, nil))
	}
	for i, n := range append(sizes, -1) {
		hdr := binary.LittleEndian.AppendUint64(nil, uint64(n))
		reqs = append(reqs, isend(t, p.sc, hdr, 1, nil))
		if n >= 0 {
			src := make([]byte, n)
			fill(src, uint64(i))
			reqs = append(reqs, isend(t, p.sc, src, 2, nil))
		}
	}
	for _, r := range reqs {
		if _, err := wait(t, "exchange", r); err != nil {
			t.Fatal(err)
		}
	}
	for i, d := range dsts {
		if err := check(d, uint64(i)); err != nil {
			t.Errorf("echo of %d bytes: %v", sizes[i], err)
		}
	}
	// Last, the child sends from a registered Region (zero copy where the
	// transport has it) into one here.
	dst := make([]byte, regionMsg)
	if r, err := transport.Alloc(regionMsg); err == nil {
		defer r.Close()
		dst = r.Bytes()[:regionMsg]
	}
	mh, err := p.rc.RegMR(dst)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	mustWait(t, "receive from a registered region", irecv(t, p.rc, dst, 3, mh), regionMsg)
	if err := check(dst, 77); err != nil {
		t.Errorf("message from a registered region: %v", err)
	}
	p.ctl.Expect(t, "done")
	if err := c.Wait(); err != nil {
		t.Errorf("peer process: %v", err)
	}
}

func exchangeChild(t *testing.T, p *peer) {
	buf := make([]byte, 8)
	for range 100 {
		mustWait(t, "ping", irecv(t, p.rc, buf, 9, nil), 8)
		binary.LittleEndian.PutUint64(buf, binary.LittleEndian.Uint64(buf)+1)
		mustWait(t, "pong", isend(t, p.sc, buf, 9, nil), 8)
	}
	var sends []transport.Request
	for {
		hdr := make([]byte, 8)
		mustWait(t, "header", irecv(t, p.rc, hdr, 1, nil), 8)
		n := int64(binary.LittleEndian.Uint64(hdr))
		if n < 0 {
			break
		}
		b := make([]byte, n)
		mustWait(t, "message", irecv(t, p.rc, b, 2, nil), int(n))
		sends = append(sends, isend(t, p.sc, b, 2, nil))
	}
	for _, r := range sends {
		if _, err := wait(t, "echo", r); err != nil {
			t.Fatal(err)
		}
	}
	src := make([]byte, regionMsg)
	if r, err := transport.Alloc(regionMsg); err == nil {
		defer r.Close()
		src = r.Bytes()[:regionMsg]
	}
	fill(src, 77)
	mh, err := p.sc.RegMR(src)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	mustWait(t, "send from a registered region", isend(t, p.sc, src, 3, mh), regionMsg)
	if err := p.sc.DeregMR(mh); err != nil {
		t.Errorf("DeregMR: %v", err)
	}
	p.ctl.Say(t, "done")
	p.ctl.Drain() // until the parent closes the channel
}

// killParent leaves a receive and a large send pending with the child,
// kills the child, and wants both to fail soon, naming the peer.
func killParent(t *testing.T, p *peer, c *peerproc.Child) {
	p.ctl.Expect(t, "ready")
	rr := irecv(t, p.rc, make([]byte, 64), 1, nil)
	sr := isend(t, p.sc, make([]byte, 8<<20), 1, nil)
	time.Sleep(20 * time.Millisecond)
	if done, _, err := rr.Test(); done {
		t.Fatalf("receive done before the peer sent anything: %v", err)
	}
	start := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	lostIn(t, "receive from a killed process", rr, p.rc.Peer(), start)
	lostIn(t, "send to a killed process", sr, p.sc.Peer(), start)
	if _, err := p.sc.Isend(make([]byte, 1), 1, nil); !errors.Is(err, transport.ErrPeerLost) {
		t.Errorf("Isend after the peer's death = %v, want ErrPeerLost", err)
	}
}

func killChild(t *testing.T, p *peer) {
	p.ctl.Say(t, "ready")
	p.ctl.Drain() // killed while waiting here
}
