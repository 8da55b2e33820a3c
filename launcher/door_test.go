package launcher

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/hostfile"
)

// storm keeps conns silent connections open to addr, each reopened as soon
// as the other side closes it, until stop (or the test's end); opened
// counts the connections it made. It is the review's `atk storm`.
func storm(t *testing.T, addr string, conns int) (opened *atomic.Int64, stop func()) {
	t.Helper()
	opened = new(atomic.Int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	live := map[net.Conn]bool{}
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, 3*time.Second)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				opened.Add(1)
				mu.Lock()
				if live == nil { // stopped
					mu.Unlock()
					c.Close()
					return
				}
				live[c] = true
				mu.Unlock()
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				mu.Lock()
				delete(live, c) // a no-op once stopped
				mu.Unlock()
				c.Close()
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			mu.Lock()
			for c := range live {
				c.Close()
			}
			live = nil
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return opened, stop
}

// Attack 1h of the security review: a storm of silent connections,
// reopened as the head closes them, at the agents' port while the agents
// come in. Every genuine agent gets through: the door closes silent
// connections to make room, never one whose handshake is under way, and
// an agent whose connection was closed before the head took it tries
// again. Before the door told them apart, an agent got "not this job's
// head: ... connection reset by peer", or was closed after it had sent
// its proof and never arrived.
func TestConnectBackStorm(t *testing.T) {
	h := startTestHead(t)
	opened, stop := storm(t, h.addr, 300)
	// The storm is on: the door has closed a few thousand connections.
	waitFor(t, func() bool { return h.refused.count() >= 1000 }, "the storm to fill the door")
	const agents = 16
	start := time.Now()
	errs := make(chan error, agents)
	for i := range agents {
		go func() {
			c, err := dialHead(h.addr, h.key, h.id.fingerprint, fmt.Sprintf("node%02d", i))
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	for range agents {
		if err := <-errs; err != nil {
			t.Errorf("a genuine agent during the storm: %v", err)
		}
	}
	stop()
	for got := 0; got < agents; got++ {
		select {
		case <-h.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d agents arrived", got, agents)
		}
	}
	t.Logf("%d agents in during the storm in %v; the storm opened %d connections, the head refused %d",
		agents, time.Since(start).Round(time.Millisecond), opened.Load(), h.refused.count())
}

// closingListener plays a door that a flood overruns: it closes the first
// n connections it accepts, each in one way (how), and hands the others
// to whoever accepts on it.
type closingListener struct {
	net.Listener
	id   *headIdentity // the head's, for "after the proof"
	how  string        // "reset", "at once", "after the proof"
	left atomic.Int64
	shut atomic.Int64 // connections closed so far
}

func (l *closingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.left.Add(-1) < 0 {
			return c, err
		}
		go func() {
			defer l.shut.Add(1)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			switch l.how {
			case "reset": // once the ClientHello came: RST
				c.Read(make([]byte, 1))
				c.(*net.TCPConn).SetLinger(0)
			case "after the proof": // the head, proven, then gone before it answers
				t := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{l.id.cert}, MinVersion: tls.VersionTLS13})
				if t.Handshake() == nil {
					readLine(t, 512)
				}
			}
			c.Close()
		}()
	}
}

// An agent whose connection the head's door closes (a reset, a close
// before the handshake, or after the proof, before the head answered)
// tries again, and gets in once the door lets it; the head sees one
// agent. Before, the first close was the agent's end: "not this job's
// head" for a reset, or, after the proof, an agent that took the head
// for its own and never arrived.
func TestDialHeadRetries(t *testing.T) {
	for _, how := range []string{"reset", "at once", "after the proof"} {
		t.Run(how, func(t *testing.T) {
			h := startTestHeadOn(t, func(ln net.Listener, id *headIdentity) net.Listener {
				cl := &closingListener{Listener: ln, id: id, how: how}
				cl.left.Store(3)
				return cl
			})
			c, err := dialHead(h.addr, h.key, h.id.fingerprint, "node02")
			if err != nil {
				t.Fatalf("dialHead through a door that closed 3 connections (%s): %v", how, err)
			}
			defer c.Close()
			select {
			case a := <-h.arrived:
				if a.node != "node02" {
					t.Errorf("arrived as %q", a.node)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the agent never arrived; the head said %q", h.log.String())
			}
			select {
			case a := <-h.arrived:
				t.Errorf("a second agent arrived: %q", a.node)
			default:
			}
		})
	}
}

// A door that keeps closing every connection: the agent gives up within
// its bound, says what happened (the door kept closing it, maybe a flood)
// and does not blame an impostor (ErrNotHead), since nothing showed it a
// certificate that is not the head's.
func TestDialHeadGivesUp(t *testing.T) {
	for _, how := range []string{"reset", "after the proof"} {
		t.Run(how, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			id, err := newHeadIdentity()
			if err != nil {
				t.Fatal(err)
			}
			cl := &closingListener{Listener: ln, id: id, how: how}
			cl.left.Store(1 << 40)
			go func() {
				for {
					if _, err := cl.Accept(); err != nil {
						return
					}
				}
			}()
			defer ln.Close()
			const within = 1500 * time.Millisecond
			start := time.Now()
			_, err = dialHeadWithin(ln.Addr().String(), []byte("0123456789abcdef"), id.fingerprint, "node02", within)
			took := time.Since(start)
			if err == nil {
				t.Fatal("dialHead through a door that closes everything succeeded")
			}
			if errors.Is(err, ErrNotHead) || !strings.Contains(err.Error(), "kept closing this connection") || !strings.Contains(err.Error(), "flooding") {
				t.Errorf("the agent said %q; want the door named, and not ErrNotHead", err)
			}
			if took > within+5*time.Second {
				t.Errorf("the agent gave up after %v, want about %v", took, within)
			}
			if n := cl.shut.Load(); n < 2 {
				t.Errorf("the agent tried %d times", n)
			}
			t.Logf("%v after %v", err, took.Round(time.Millisecond))
		})
	}
}

// A wrong key is the agent's end at once: the head answers the proof
// with a refusal, which no retry can mend.
func TestDialHeadWrongKey(t *testing.T) {
	h := startTestHead(t)
	start := time.Now()
	_, err := dialHead(h.addr, []byte("not-the-job's-key-0123456789abcd"), h.id.fingerprint, "node02")
	if err == nil || !strings.Contains(err.Error(), "refused this agent's proof") || errors.Is(err, ErrNotHead) {
		t.Errorf("a wrong key: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a wrong key took %v to be told", d)
	}
	waitFor(t, func() bool { return h.refused.count() == 1 }, "the head's refusal")
	if log := h.log.String(); !strings.Contains(log, "wrong key") {
		t.Errorf("the head said %q", log)
	}
}

// fakeConn is a connection with a source address, and nothing else.
type fakeConn struct {
	net.Conn
	from   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.from }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

// The door's rules, one connection at a time: past the bounds (in all, or
// from one address), a new connection takes the place of the oldest
// silent one (of its own address, where that is the full one), else of
// the oldest in flight for doorYoung; a handshake under way and younger
// is never closed, and when only such are left the newcomer is refused.
func TestDoorAdmit(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var log lockedBuffer
	d := &door{total: 5, perSource: 3, refused: &refusals{w: &log}, now: func() time.Time { return now }, from: map[string]int{}}
	conns := map[string]*doorConn{}
	come := func(name, ip string) (victim string, why string) {
		t.Helper()
		dc, v, why := d.admit(&fakeConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000 + len(conns)}})
		if dc != nil {
			conns[name] = dc
		}
		for n, c := range conns {
			if c == v {
				victim = n
			}
		}
		return victim, why
	}
	check := func(step, gotVictim, gotWhy, wantVictim, wantWhy string) {
		t.Helper()
		if gotVictim != wantVictim || (wantWhy == "") != (gotWhy == "") || !strings.Contains(gotWhy, wantWhy) {
			t.Errorf("%s: victim %q, refusal %q; want victim %q, refusal %q", step, gotVictim, gotWhy, wantVictim, wantWhy)
		}
	}
	for _, n := range []string{"a1", "a2", "a3"} {
		v, why := come(n, "10.0.0.1")
		check(n, v, why, "", "")
	}
	// 10.0.0.1 is full: its oldest silent connection makes room.
	v, why := come("a4", "10.0.0.1")
	check("a4", v, why, "a1", "")
	if got := refusal(conns["a1"], io.EOF); !strings.Contains(got, "to make room for a newer connection: it had sent nothing") {
		t.Errorf("a1's refusal: %q", got)
	}
	if got := refusal(conns["a2"], io.EOF); got != "EOF" {
		t.Errorf("a2's refusal: %q", got)
	}
	// Once its connections all began their handshakes, it is refused.
	for _, n := range []string{"a2", "a3", "a4"} {
		conns[n].spoke.Store(true)
	}
	v, why = come("a5", "10.0.0.1")
	check("a5", v, why, "", "handshakes from 10.0.0.1 are under way already")
	// Another address finds room, up to the bound in all.
	v, why = come("b1", "10.0.0.2")
	check("b1", v, why, "", "")
	v, why = come("b2", "10.0.0.2")
	check("b2", v, why, "", "")
	// Full: the oldest silent one goes, of any address.
	v, why = come("c1", "10.0.0.3")
	check("c1", v, why, "b1", "")
	for _, n := range []string{"b2", "c1"} {
		conns[n].spoke.Store(true)
	}
	v, why = come("c2", "10.0.0.3")
	check("c2", v, why, "", "5 handshakes are under way already")
	// doorYoung later, the oldest handshake is stale and makes room; the
	// freshest stays.
	now = now.Add(doorYoung)
	v, why = come("c3", "10.0.0.3")
	check("c3", v, why, "a2", "")
	if got := refusal(conns["a2"], io.EOF); !strings.Contains(got, "its handshake was older than 2s") {
		t.Errorf("a2's refusal: %q", got)
	}
	conns["c3"].spoke.Store(true)
	v, why = come("a6", "10.0.0.1")
	check("a6", v, why, "a3", "")
	// A handshake that ends leaves room, counted once even if it was a
	// victim already.
	d.leave(conns["a2"])
	d.leave(conns["c3"])
	if len(d.open) != 4 || d.from["10.0.0.1"] != 2 || d.from["10.0.0.2"] != 1 || d.from["10.0.0.3"] != 1 {
		t.Errorf("in flight: %d, per address %v", len(d.open), d.from)
	}
}

// An endpoint's door: one held silent connection per connection of a
// flood, raw or TLS (which is done with its handshake and then says
// nothing), up to the door's bound and no more; a genuine node still
// joins meanwhile. Attack 2h of the security review: 4,500 TLS
// connections held 4,518 descriptors and 121 MB for 10 s each.
func TestEndpointHandshakeCap(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flood int
		tls   bool
	}{
		{"raw", 400, false},
		{"TLS", 160, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			token := []byte(strings.Repeat("5e", 32))
			p := &PerNode{Endpoint: "127.0.0.1:0", Token: token, MinNodes: 2, MaxNodes: 2, NProc: 1, Timeout: 30 * time.Second}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var log lockedBuffer
			s, err := newNodeServer(ln, p, &log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			addr := ln.Addr().String()
			limit := newDoor(p.MaxNodes, nil).perSource // every connection comes from 127.0.0.1

			var held, shut atomic.Int64 // connections the endpoint took, and closed
			var mu sync.Mutex
			var flood []net.Conn
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range flood {
					c.Close()
				}
			}()
			start := time.Now()
			for range tt.flood {
				var c net.Conn
				var err error
				if tt.tls {
					c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
				} else {
					c, err = net.DialTimeout("tcp", addr, 5*time.Second)
				}
				if err != nil {
					shut.Add(1) // closed at once: the TLS handshake failed
					continue
				}
				held.Add(1)
				mu.Lock()
				flood = append(flood, c)
				mu.Unlock()
				go func() {
					io.Copy(io.Discard, c)
					shut.Add(1)
				}()
			}
			// Within the endpoint's handshake bound (before which it closed
			// nothing), it holds no more than the door's bound.
			for deadline := start.Add(rdzvShake - time.Second); int64(tt.flood)-shut.Load() > int64(limit); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the endpoint holds %d of %d flood connections after %v; want at most %d",
						int64(tt.flood)-shut.Load(), tt.flood, time.Since(start).Round(time.Millisecond), limit)
				}
			}
			t.Logf("%d of %d flood connections held after %v", int64(tt.flood)-shut.Load(), tt.flood, time.Since(start).Round(time.Millisecond))

			// A genuine node joins during the flood.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n := &nodeJoin{p: p, stderr: io.Discard}
			l, err := n.dial(ctx, addr, joinHello{ID: p.ID, NProc: 1, Min: 2, Max: 2, Host: "genuine"})
			if err != nil {
				t.Fatalf("a genuine node during the flood: %v\nthe endpoint said:\n%s", err, log.String())
			}
			defer l.c.Close()
			waitFor(t, func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return len(s.lobby) == 1
			}, "the node in the lobby")
			s.close()
			if got := strings.Count(log.String(), "gorun: refused a connection"); got != 1 {
				t.Errorf("the endpoint wrote %d lines about a first refusal:\n%s", got, log.String())
			}
		})
	}
}

// startTestHeadOn is startTestHead on the listener that wrap makes of
// the head's.
func startTestHeadOn(t *testing.T, wrap func(net.Listener, *headIdentity) net.Listener) *testHead {
	t.Helper()
	id, err := newHeadIdentity()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &testHead{addr: ln.Addr().String(), id: id, key: []byte("0123456789abcdef0123456789abcdef"),
		arrived: make(chan arrival, 8), log: &lockedBuffer{}}
	h.refused = &refusals{w: h.log}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveAgents(wrap(ln, id), h.id, h.key, newDoor(2, h.refused), func(node string, c net.Conn) { h.arrived <- arrival{node, c} })
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return h
}

// stormWatch collects what a SlurmStarter writes on its stderr: srun's
// output (the stand-in agents' lines, connectback_bench_test.go) and the
// head's refusals.
type stormWatch struct {
	lockedBuffer
	ready, failed    chan struct{} // an agent's "cb-ready", the first "cb-fail"
	readied, failing sync.Once
}

func (w *stormWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "cb-ready") {
		w.readied.Do(func() { close(w.ready) })
	}
	if strings.Contains(string(p), "cb-fail") {
		w.failing.Do(func() { close(w.failed) })
	}
	return w.lockedBuffer.Write(p)
}

// Attack 1h with the real SlurmStarter: srun (a stand-in: this test
// binary as the agents of every node, connectback_bench_test.go) starts
// the agents in the middle of a storm at the head's door. Every node's
// StartAgent returns its agent, and the job's stderr says one refusal
// line and, at the end, one summary, however many the storm made.
func TestSlurmStarterStorm(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(dir, "srun")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(connectBackAgentsEnv, "1")
	const nodes = 8
	hosts := []hostfile.Host{{Name: "localhost", Slots: 1}}
	for i := range nodes {
		hosts = append(hosts, hostfile.Host{Name: fmt.Sprintf("node%02d", i), Slots: 1})
	}
	plan, err := NewPlan(hosts, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &stormWatch{ready: make(chan struct{}), failed: make(chan struct{})}
	s := NewSlurmStarter("/unused/gorun", plan, "lo", w)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.srun.Process.Signal(syscall.SIGTERM)
		<-s.dead
	}()
	select {
	case <-w.ready:
	case <-s.dead:
		t.Fatalf("the agents' process ended (%s): %s", s.why, w.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the agents' process was not ready: %s", w.String())
	}
	opened, stop := storm(t, s.door.ln.Addr().String(), 300)
	waitFor(t, func() bool { return s.door.refused.count() >= 1000 }, "the storm to fill the door")
	if err := s.srun.Process.Signal(syscall.SIGUSR1); err != nil { // the agents dial
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentHandshakeTimeout+10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-w.failed: // an agent gave up: its node's StartAgent would wait in vain
			cancel()
		case <-ctx.Done():
		}
	}()
	errs := make(chan error, nodes)
	for _, node := range s.nodes {
		go func() {
			a, err := s.StartAgent(ctx, hostfile.Host{Name: node})
			if err == nil {
				a.Kill()
			}
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Errorf("StartAgent during the storm: %v", err)
		}
	}
	stop()
	waitFor(t, func() bool { return strings.Contains(w.String(), "cb-done") }, "the agents' summary")
	if !strings.Contains(w.String(), fmt.Sprintf("cb-done ok=%d fail=0 ", nodes)) {
		t.Errorf("the agents said:\n%s", w.String())
	}
	s.srun.Process.Signal(syscall.SIGUSR1) // the agents' process ends, and so srun
	<-s.dead                               // and the summary is written
	out := w.String()
	if first, sums := strings.Count(out, "gorun: refused a connection"), strings.Count(out, "gorun: refused "); first != 1 || sums != 2 {
		t.Errorf("the head wrote %d first-refusal lines and %d in all about refusals, want 1 and 2:\n%s", first, sums, out)
	}
	t.Logf("the storm opened %d connections; the head refused %d", opened.Load(), s.door.refused.count())
}
