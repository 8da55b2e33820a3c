package launcher

// The master gate: MASTER_PORT is held open on rank 0's host from the
// agent's hello on, before any rank starts, and each connection to it is
// passed on to rank 0, which listens on a port of its own.
//
// torch's env:// rendezvous has rank 0 serve a TCPStore at
// MASTER_ADDR:MASTER_PORT while every rank connects to it; a rank whose
// connection is refused (rank 0 still importing torch) sleeps a whole
// second before it tries again (torch 1.13's socket connect loop), so a
// job of ranks started together took 1 s longer, or not, by luck.
// torchrun avoids this by serving the store from its agent; gorun does
// not speak the store's protocol, which changes between torch versions,
// and passes bytes instead: the other ranks' connections wait at the gate
// until rank 0 listens, whatever the program speaks there.

import (
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/procfs"
)

// gateWait bounds how long a connection waits at the gate for rank 0:
// torch's own default store timeout is longer, but a rank 0 that never
// listens is a failed job long before.
const gateWait = 10 * time.Minute

// gateWaiting bounds the connections waiting at the gate at once: a job's
// ranks are far fewer, and more only hold the agent's descriptors (one
// beyond it is closed at once, as a refused one would have been).
const gateWaiting = 4096

// masterGate holds MASTER_PORT and passes connections on to rank 0.
type masterGate struct {
	ln   net.Listener
	port int

	mu      sync.Mutex
	target  string        // rank 0's host:port in the current generation; "" = none yet
	moved   chan struct{} // closed when target changes
	waiting int           // connections waiting for rank 0
	done    chan struct{} // closed by close
	once    sync.Once
}

// openMasterGate listens on a free port outside the ephemeral range (see
// freePort) and serves it; nil if no port could be had.
func openMasterGate() *masterGate {
	ln, port := listenFreePort()
	if ln == nil {
		return nil
	}
	g := &masterGate{ln: ln, port: port, moved: make(chan struct{}), done: make(chan struct{})}
	go g.serve()
	return g
}

// close stops taking connections and ends those waiting; those passed
// on to rank 0 go on. It may be called again, and on nil.
func (g *masterGate) close() {
	if g != nil {
		g.once.Do(func() {
			g.ln.Close()
			close(g.done)
		})
	}
}

// aim makes rank 0's listener at addr the place connections go from now.
func (g *masterGate) aim(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.target = addr
	close(g.moved)
	g.moved = make(chan struct{})
}

// current is the target and the channel that says it moved.
func (g *masterGate) current() (string, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.target, g.moved
}

func (g *masterGate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		g.mu.Lock()
		full := g.waiting >= gateWaiting
		if !full {
			g.waiting++
		}
		g.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		go g.pass(c)
	}
}

// pass connects c to rank 0, trying every few milliseconds until rank 0
// listens, and copies both ways until both sides are done.
func (g *masterGate) pass(c net.Conn) {
	defer c.Close()
	waiting := true
	defer func() {
		if waiting {
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
		}
	}()
	deadline := time.Now().Add(gateWait)
	pause := 2 * time.Millisecond
	for time.Now().Before(deadline) {
		target, moved := g.current()
		if target != "" {
			t, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err == nil {
				g.mu.Lock()
				g.waiting--
				g.mu.Unlock()
				waiting = false
				splice(c, t)
				return
			}
		}
		select {
		case <-g.done:
			return
		case <-moved:
		case <-time.After(pause):
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// splice copies a to b and b to a, passing each end's close on.
func splice(a, b net.Conn) {
	defer b.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.CloseWrite()
	}
}

// listenFreePort listens on a TCP port that is free now and lies outside
// the kernel's ephemeral range, so that no outgoing connection takes it
// (on every interface, as torch's store listens). It never takes a fixed
// default; nil if 64 tries found none.
func listenFreePort() (net.Listener, int) {
	lo, hi := 32768, 60999
	if l, h, ok := procfs.Proc.PortRange(); ok {
		lo, hi = l, h
	}
	pick := func() int {
		if lo > 11024 {
			return 10000 + rand.IntN(lo-10000)
		}
		if hi < 64000 {
			return hi + 1 + rand.IntN(65535-hi)
		}
		return 1024 + rand.IntN(64511)
	}
	for range 64 {
		p := pick()
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err == nil {
			return ln, p
		}
	}
	return nil, 0
}

// freePort picks a TCP port that is free now (listenFreePort), for a
// rank that listens on it soon after.
func freePort() int {
	ln, p := listenFreePort()
	if ln != nil {
		ln.Close()
	}
	return p
}
