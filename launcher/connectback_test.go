package launcher

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/internal/selfcert"
)

// lockedBuffer is a bytes.Buffer for several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testHead is a head's side of the connect-back on loopback: its address,
// the agents that proved themselves, and what it said about refusals.
type testHead struct {
	addr    string
	id      *headIdentity
	key     []byte
	arrived chan arrival
	log     *lockedBuffer
	refused *refusals
}

type arrival struct {
	node string
	c    net.Conn
}

func startTestHead(t *testing.T) *testHead {
	t.Helper()
	return startTestHeadOn(t, func(ln net.Listener, _ *headIdentity) net.Listener { return ln })
}

// agentEnv sets what srun's environment gives an agent of h.
func (h *testHead) agentEnv(t *testing.T) {
	t.Setenv(AgentKeyEnv, hex.EncodeToString(h.key))
	t.Setenv(HeadCertEnv, h.id.fingerprint)
}

// An srun-started agent connects back over TLS, is accepted as its node,
// and the control stream is intact both ways; the key and the head's
// fingerprint leave the agent's environment; a wrong key, a stranger and
// missing variables are refused, each with a reason.
func TestConnectBack(t *testing.T) {
	h := startTestHead(t)
	h.agentEnv(t)
	c, err := DialHead(h.addr, "node02")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if os.Getenv(AgentKeyEnv) != "" || os.Getenv(HeadCertEnv) != "" {
		t.Error("the agent key or the head's fingerprint stayed in the environment")
	}
	var a arrival
	select {
	case a = <-h.arrived:
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent never arrived; the head said %q", h.log.String())
	}
	if a.node != "node02" {
		t.Fatalf("arrived as %q", a.node)
	}
	io.WriteString(c, "hello")
	io.WriteString(a.c, "world")
	got := make([]byte, 5)
	if _, err := io.ReadFull(a.c, got); err != nil || string(got) != "hello" {
		t.Errorf("head read %q, %v", got, err)
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "world" {
		t.Errorf("agent read %q, %v", got, err)
	}
	if h.log.String() != "" {
		t.Errorf("the head refused something: %s", h.log.String())
	}

	// The wrong key: the TLS handshake succeeds, the proof does not.
	t.Setenv(AgentKeyEnv, strings.Repeat("ff", 32))
	t.Setenv(HeadCertEnv, h.id.fingerprint)
	if c, err := DialHead(h.addr, "node03"); err == nil {
		c.Close()
	}
	// A stranger that does not speak TLS.
	s, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(s, "GET / HTTP/1.0\r\n\r\n")
	io.Copy(io.Discard, s)
	s.Close()
	waitFor(t, func() bool { return h.refused.count() == 2 }, "two refusals")
	h.refused.summary()
	log := h.log.String()
	if !strings.Contains(log, "wrong key") || !strings.Contains(log, "refused 1 more connections") || !strings.Contains(log, "not a gorun agent") {
		t.Errorf("the head said:\n%s", log)
	}
	select {
	case a := <-h.arrived:
		t.Errorf("%q arrived with the wrong key or as a stranger", a.node)
	default:
	}

	for _, tt := range []struct{ key, pin, want string }{
		{"", h.id.fingerprint, AgentKeyEnv},
		{hex.EncodeToString(h.key), "", HeadCertEnv},
		{hex.EncodeToString(h.key), "abcd", HeadCertEnv},
	} {
		t.Setenv(AgentKeyEnv, tt.key)
		t.Setenv(HeadCertEnv, tt.pin)
		if _, err := DialHead(h.addr, "x"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("key %q pin %q: %v", tt.key, tt.pin, err)
		}
	}
}

// count is the number of refusals so far.
func (r *refusals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	if r.shown {
		n++
	}
	return n
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Attack 2f of the security review: something else listens on the
// address an agent dials (another user of the node), and speaks either
// the TLS of the new connect-back with a certificate of its own, or the
// nonce-and-MAC of the old one. The agent refuses both, names the
// address, and sends neither its proof nor anything derived from the key.
func TestConnectBackImpostor(t *testing.T) {
	h := startTestHead(t) // the real head: its key and fingerprint are the agent's
	impostorID, err := newHeadIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"tls", "old nonce"} {
		t.Run(mode, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			heard := make(chan string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					heard <- err.Error()
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var got bytes.Buffer
				if mode == "tls" {
					srv := tls.Server(teeConn{c, &got}, &tls.Config{Certificates: []tls.Certificate{impostorID.cert}, MinVersion: tls.VersionTLS13})
					if err := srv.Handshake(); err == nil {
						line, _ := readLine(srv, 512)
						got.WriteString("\nDECRYPTED: " + line)
					}
				} else {
					io.WriteString(c, "GORUN-HEAD 00112233445566778899aabbccddeeff\n")
					io.Copy(&got, c)
				}
				heard <- got.String()
			}()
			h.agentEnv(t)
			_, err = DialHead(ln.Addr().String(), "node02")
			if !errors.Is(err, ErrNotHead) || !strings.Contains(err.Error(), ln.Addr().String()) {
				t.Errorf("DialHead to an impostor: %v, want an error naming %s as not this job's head", err, ln.Addr())
			}
			got := <-heard
			if strings.Contains(got, "GORUN-AGENT") || strings.Contains(got, "DECRYPTED") || strings.Contains(got, hex.EncodeToString(h.key)) {
				t.Errorf("the impostor got the agent's proof: %q", got)
			}
		})
	}
}

// teeConn copies what is read from a connection into w.
type teeConn struct {
	net.Conn
	w io.Writer
}

func (t teeConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	t.w.Write(p[:n])
	return n, err
}

// The agent's proof is bound to its TLS session: a proof made on one
// connection (as a relay between an agent and the head would pass it on)
// is refused on another. And once connected, bytes that a man in the
// middle injects into the stream are an error, not control frames.
func TestConnectBackRelayAndInjection(t *testing.T) {
	h := startTestHead(t)
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first, second := dial(), dial()
	defer first.Close()
	defer second.Close()
	cs := first.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		t.Fatal(err)
	}
	// The proof is right, for the first connection; sent on the second.
	io.WriteString(second, agentPrefix+"node02 "+hex.EncodeToString(selfcert.Proof(h.key, agentWhat("node02"), ekm))+"\n")
	waitFor(t, func() bool { return h.refused.count() == 1 }, "the relayed proof's refusal")
	if log := h.log.String(); !strings.Contains(log, "wrong key") {
		t.Errorf("a relayed proof: the head said %q", log)
	}
	select {
	case a := <-h.arrived:
		t.Fatalf("a relayed proof got %q accepted", a.node)
	default:
	}

	// Injection: a relay that forwards a genuine agent's connection, then
	// writes a forged record of its own toward the agent.
	relay, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	inject := make(chan struct{})
	go func() {
		a, err := relay.Accept()
		if err != nil {
			return
		}
		defer a.Close()
		b, err := net.Dial("tcp", h.addr)
		if err != nil {
			return
		}
		defer b.Close()
		go io.Copy(b, a)
		var mu sync.Mutex
		go func() {
			<-inject
			mu.Lock()
			// An application-data record that no TLS key made.
			a.Write([]byte{0x17, 0x03, 0x03, 0x00, 0x20})
			a.Write(bytes.Repeat([]byte{0x42}, 0x20))
			mu.Unlock()
		}()
		buf := make([]byte, 4096)
		for {
			n, err := b.Read(buf)
			if n > 0 {
				mu.Lock()
				a.Write(buf[:n])
				mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	h.agentEnv(t)
	c, err := DialHead(relay.Addr().String(), "node02")
	if err != nil {
		t.Fatalf("through a faithful relay: %v", err)
	}
	defer c.Close()
	a := <-h.arrived
	defer a.c.Close()
	close(inject)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if err == nil || n > 0 {
		t.Errorf("the agent read %d injected bytes (err %v)", n, err)
	}
}

// Attack 2e of the security review: with the head's descriptor limit at
// 256 and a burst of 400 silent connections to its agents' port, the
// accept loop lives on and a genuine agent that comes after them is
// accepted; the job's stderr gets one refusal line and one summary, not
// one line per connection. The head runs in a child process, which alone
// gets the low limit.
func TestConnectBackFlood(t *testing.T) {
	if os.Getenv("GORUN_TEST_FLOOD_HEAD") == "1" {
		floodHead()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnectBackFlood$")
	cmd.Env = append(os.Environ(), "GORUN_TEST_FLOOD_HEAD=1")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("the head said nothing: %s", stderr.String())
	}
	var addr, fp, key string
	if _, err := fmt.Sscan(lines.Text(), &addr, &fp, &key); err != nil {
		t.Fatalf("head: %q: %v", lines.Text(), err)
	}
	var flood []net.Conn
	for range 400 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("flood connection %d: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	t.Setenv(AgentKeyEnv, key)
	t.Setenv(HeadCertEnv, fp)
	start := time.Now()
	c, err := DialHead(addr, "node02")
	if err != nil {
		t.Fatalf("a genuine agent after the flood: %v\nthe head said:\n%s", err, stderr.String())
	}
	c.Close()
	if !lines.Scan() || lines.Text() != "arrived node02" {
		t.Fatalf("the head's next line %q; it said:\n%s", lines.Text(), stderr.String())
	}
	t.Logf("a genuine agent was accepted %v after a flood of 400", time.Since(start).Round(time.Millisecond))
	stdin.Close() // the head sums up its refusals and leaves
	cmd.Wait()
	log := strings.TrimSpace(stderr.String())
	if n := strings.Count(log, "\n") + 1; n > 2 || !strings.Contains(log, "refused a connection to the agents' port") {
		t.Errorf("the head wrote %d lines about refusals:\n%s", n, log)
	}
}

// floodHead is TestConnectBackFlood's head: descriptors limited to 256, it
// prints its address, certificate fingerprint and key, then each agent
// that arrives, until its stdin closes.
func floodHead() {
	lim := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(1)
	}
	id, err := newHeadIdentity()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", ln.Addr(), id.fingerprint, hex.EncodeToString(key))
	r := &refusals{w: os.Stderr}
	go serveAgents(ln, id, key, newDoor(0, r), func(node string, c net.Conn) { fmt.Printf("arrived %s\n", node) })
	io.Copy(io.Discard, os.Stdin)
	ln.Close()
	r.summary()
	os.Exit(0)
}

// The head listens on one address, the one the agents dial: --iface's,
// else that of the default route's interface; never every interface, and
// never loopback when the node has another address. srun gets that one
// address, and the key and the head's fingerprint in its environment,
// never on its command line.
func TestSlurmStarterListens(t *testing.T) {
	if ip, err := listenAddr("lo"); err != nil || ip != "127.0.0.1" {
		t.Errorf("listenAddr(lo) = %q, %v", ip, err)
	}
	if _, err := listenAddr("no-such-if0"); err == nil || !strings.Contains(err.Error(), "--iface no-such-if0") {
		t.Errorf("listenAddr(no-such-if0): %v", err)
	}
	ip, err := listenAddr("")
	if err != nil {
		t.Fatal(err)
	}
	if parsed := net.ParseIP(ip); parsed == nil || parsed.IsLoopback() || parsed.IsUnspecified() {
		t.Fatalf("listenAddr() = %q", ip)
	}
	if name := procfs.Proc.DefaultRouteIface(); name != "" {
		if want, _ := routeAddr(nil, name); want != ip {
			t.Errorf("listenAddr() = %s, want %s, the address of the default route's %s", ip, want, name)
		}
	}

	// A stand-in srun records what it was given.
	dir := t.TempDir()
	rec := dir + "/srun.txt"
	script := "#!/bin/sh\n{ echo \"ARGS $*\"; env | grep ^GORUN_; } > " + rec + "\n"
	if err := os.WriteFile(dir+"/srun", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	p, err := NewPlan([]hostfile.Host{{Name: "localhost", Slots: 1}, {Name: "node02", Slots: 1}}, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSlurmStarter("/opt/gorun", p, "", io.Discard)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	<-s.dead
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	listen := s.door.ln.Addr().(*net.TCPAddr)
	if listen.IP.String() != ip {
		t.Errorf("the head listened on %s, want %s", listen, ip)
	}
	if want := "agent --connect " + listen.String() + "\n"; !strings.Contains(got, want) {
		t.Errorf("srun's arguments lack %q (one address, the head's):\n%s", want, got)
	}
	if !strings.Contains(got, AgentKeyEnv+"="+hex.EncodeToString(s.door.key)) || !strings.Contains(got, HeadCertEnv+"="+s.door.id.fingerprint) {
		t.Errorf("srun's environment lacks the key or the fingerprint:\n%s", got)
	}
	if args := strings.SplitN(got, "\n", 2)[0]; strings.Contains(args, hex.EncodeToString(s.door.key)) || strings.Contains(args, s.door.id.fingerprint) {
		t.Errorf("a secret is on srun's command line: %s", args)
	}
}

// The connect-back's cost: a TLS 1.3 handshake with the head's
// certificate, and the agent's proof, over loopback.
func BenchmarkConnectBack(b *testing.B) {
	id, err := newHeadIdentity()
	if err != nil {
		b.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go serveAgents(ln, id, key, newDoor(0, &refusals{w: io.Discard}), func(node string, c net.Conn) { c.Close() })
	for b.Loop() {
		b.StopTimer()
		os.Setenv(AgentKeyEnv, hex.EncodeToString(key))
		os.Setenv(HeadCertEnv, id.fingerprint)
		b.StartTimer()
		c, err := DialHead(ln.Addr().String(), "node02")
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// Attack 2c of the security review, slowloris on the agents' port: a
// connection that says nothing, one that dribbles a TLS record, and one
// that completes TLS (anyone can) and then dribbles its proof are each
// closed headHandshakeTimeout after they connected; a genuine agent that
// comes meanwhile is accepted at once, since handshakes run side by side.
func TestConnectBackSlowloris(t *testing.T) {
	h := startTestHead(t)
	dribble := func(c net.Conn, b []byte) {
		for _, x := range b {
			if _, err := c.Write([]byte{x}); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	slow := map[string]func() (net.Conn, error){
		"silent": func() (net.Conn, error) { return net.Dial("tcp", h.addr) },
		"TLS record": func() (net.Conn, error) {
			c, err := net.Dial("tcp", h.addr)
			if err == nil { // a handshake record of 512 bytes, one byte at a time
				go dribble(c, append([]byte{0x16, 0x03, 0x01, 0x02, 0x00}, bytes.Repeat([]byte{1}, 512)...))
			}
			return c, err
		},
		"proof": func() (net.Conn, error) {
			c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			if err == nil {
				go dribble(c, []byte(agentPrefix+"node09 "+strings.Repeat("ab", 32)))
			}
			return c, err
		},
	}
	var wg sync.WaitGroup
	for name, dial := range slow {
		c, err := dial()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		start := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(start.Add(15 * time.Second))
			_, err := io.Copy(io.Discard, c)
			d := time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("%s: still open after %v", name, d)
			} else if d < headHandshakeTimeout-500*time.Millisecond || d > headHandshakeTimeout+3*time.Second {
				t.Errorf("%s: closed after %v, want %v", name, d, headHandshakeTimeout)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	h.agentEnv(t)
	start := time.Now()
	c, err := DialHead(h.addr, "node02")
	if err != nil {
		t.Fatalf("a genuine agent during the slowloris: %v", err)
	}
	defer c.Close()
	select {
	case a := <-h.arrived:
		if a.node != "node02" {
			t.Errorf("arrived as %q", a.node)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the genuine agent was accepted after %v, behind the slow connections", d)
		}
	case <-time.After(headHandshakeTimeout + 5*time.Second):
		t.Fatalf("the genuine agent never arrived; the head said %q", h.log.String())
	}
	wg.Wait()
	waitFor(t, func() bool { return h.refused.count() == 3 }, "three refusals")
	select {
	case a := <-h.arrived:
		t.Errorf("a slow connection arrived as %q", a.node)
	default:
	}
}

// Attack 2d of the security review: 1 MiB without a newline on the
// agents' port, as junk before TLS and in place of the proof after it (the
// head shows its certificate to anyone), is refused at once, well before
// the handshake's timeout: the proof line is read to 512 bytes at most.
func TestConnectBackLongLine(t *testing.T) {
	mib := bytes.Repeat([]byte("a"), 1<<20)
	for _, tt := range []struct {
		name string
		tls  bool
		want string
	}{
		{"junk", false, "not a gorun agent (TLS:"},
		{"after TLS", true, "not a gorun agent: line too long"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := startTestHead(t)
			var c net.Conn
			var err error
			if tt.tls {
				c, err = tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			} else {
				c, err = net.Dial("tcp", h.addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			go c.Write(append([]byte(agentPrefix), mib...))
			waitFor(t, func() bool { return h.refused.count() == 1 }, "the refusal")
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("refused after %v, want at once", d)
			}
			if log := h.log.String(); !strings.Contains(log, tt.want) {
				t.Errorf("the head said %q, want %q", log, tt.want)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Error("the connection stayed open after the refusal")
				}
			}
			select {
			case a := <-h.arrived:
				t.Errorf("%q arrived", a.node)
			default:
			}
		})
	}
}
