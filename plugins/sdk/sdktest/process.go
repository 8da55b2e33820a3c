package sdktest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

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
	in  *bufio.Reader
	out io.Writer
}

func (p *peer) say(t *testing.T, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(p.out, format+"\n", args...); err != nil {
		t.Fatalf("control channel: %v", err)
	}
}

// expect reads the next line from the other process, which must start
// with word, and returns the rest.
func (p *peer) expect(t *testing.T, word string) string {
	t.Helper()
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := p.in.ReadString('\n')
		got <- result{line, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(opTimeout):
		t.Fatalf("control channel: no %q from the other process within %v", word, opTimeout)
	}
	if r.err != nil {
		t.Fatalf("control channel: waiting for %q: %v", word, r.err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(r.line), word)
	if !ok {
		t.Fatalf("control channel: got %q, want %q", r.line, word)
	}
	return strings.TrimSpace(rest)
}

// link connects both ways with the other process: each side listens,
// passes its handle through the control channel as text and connects to
// the other's.
func (p *peer) link(t *testing.T) {
	t.Helper()
	l, hd := p.h.listen(p.tr)
	p.say(t, "handle %x", hd)
	other, err := hex.DecodeString(p.expect(t, "handle"))
	if err != nil {
		t.Fatalf("control channel: %v", err)
	}
	p.sc, p.rc = p.h.dial(p.tr, l, other)
}

// runPattern is the -test.run pattern that selects exactly test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// child is the peer process, seen from the parent.
type child struct {
	cmd   *exec.Cmd
	stdin io.Closer
	ctl   io.Closer
	once  sync.Once
	err   error
}

// wait closes the control channel, which tells the child to finish, and
// returns how it exited.
func (c *child) wait() error {
	c.once.Do(func() {
		c.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case c.err = <-done:
		case <-time.After(opTimeout):
			c.cmd.Process.Kill()
			c.err = fmt.Errorf("the peer process did not exit within %v: %w", opTimeout, <-done)
		}
		c.ctl.Close()
	})
	return c.err
}

// process runs a two-process test: this process runs parent; the test
// binary, re-executed with -test.run naming this test and envPeer set,
// runs inChild in the same test. Both sides make their Transport with
// newTransport.
func (s *suite) process(t *testing.T, parent func(*testing.T, *peer, *child), inChild func(*testing.T, *peer)) {
	if name := os.Getenv(envPeer); name != "" {
		if name != t.Name() {
			t.Skip("another test's peer")
		}
		p := &peer{h: newHarness(t), tr: s.transport(t), in: bufio.NewReader(os.Stdin), out: os.NewFile(3, "control")}
		p.link(t)
		inChild(t, p)
		return
	}
	tr := s.transport(t)
	args := []string{"-test.run=" + runPattern(t.Name()), "-test.count=1", "-test.timeout=3m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envPeer+"="+t.Name())
	cmd.SysProcAttr = dieWithParent()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("peer process: %v", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatalf("peer process: %v", err)
	}
	cmd.ExtraFiles = []*os.File{ctlW}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the peer process: %v", err)
	}
	ctlW.Close()
	c := &child{cmd: cmd, stdin: stdin, ctl: ctlR}
	t.Cleanup(func() {
		cmd.Process.Kill()
		c.wait()
		if t.Failed() {
			t.Logf("peer process output:\n%s", out.String())
		}
	})
	p := &peer{h: newHarness(t), tr: tr, in: bufio.NewReader(ctlR), out: stdin}
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
func exchangeParent(t *testing.T, p *peer, c *child) {
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
	p.expect(t, "done")
	if err := c.wait(); err != nil {
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
	p.say(t, "done")
	io.Copy(io.Discard, p.in) // until the parent closes the channel
}

// killParent leaves a receive and a large send pending with the child,
// kills the child with SIGKILL, and wants both to fail with ErrPeerLost
// within LostWithin.
func killParent(t *testing.T, p *peer, c *child) {
	h := p.h
	p.expect(t, "ready")
	r := h.recv(p.rc, make([]byte, 64), nil, "receive from a killed process")
	snd := h.send(p.sc, make([]byte, big), nil, "send of "+sizeName(big)+" to a killed process")
	if h.poll(20*time.Millisecond, r) {
		t.Fatalf("receive done (n = %d, err = %v) before the peer sent anything", r.n, r.err)
	}
	sendDone := snd.done
	start := time.Now()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill the peer process: %v", err)
	}
	h.fails(r, sdk.ErrPeerLost, start, LostWithin)
	if !sendDone {
		h.fails(snd, sdk.ErrPeerLost, start, LostWithin)
	}
}

func killChild(t *testing.T, p *peer) {
	p.say(t, "ready")
	io.Copy(io.Discard, p.in) // killed while waiting here
}
