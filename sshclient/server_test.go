package sshclient

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testServer is an in-process sshd on 127.0.0.1: public-key auth, "exec"
// sessions run with /bin/sh (HOME = home) and "direct-tcpip" channels.
type testServer struct {
	t        *testing.T
	ln       net.Listener
	port     int
	hostKeys []ssh.Signer
	home     string
	listen   string

	authMu     sync.Mutex
	authorized map[string]bool

	dropFirst      atomic.Int32 // close this many connections right after accept
	handshakeDelay time.Duration

	inHandshake  atomic.Int32
	maxHandshake atomic.Int32
	directTCPIP  atomic.Int32

	execMu sync.Mutex
	execs  []string

	pathFirst string // a directory before $PATH in sessions

	cred *syscall.SysProcAttr // sessions run as this user (asUser), or nil

	connMu sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

type serverOpt func(*testServer)

func withHandshakeDelay(d time.Duration) serverOpt {
	return func(s *testServer) { s.handshakeDelay = d }
}
func withListen(a string) serverOpt      { return func(s *testServer) { s.listen = a } }
func withPathFirst(dir string) serverOpt { return func(s *testServer) { s.pathFirst = dir } }
func withDropFirst(n int) serverOpt      { return func(s *testServer) { s.dropFirst.Store(int32(n)) } }
func withHostKeys(k ...ssh.Signer) serverOpt {
	return func(s *testServer) { s.hostKeys = k }
}

func newTestServer(t *testing.T, authorized []ssh.PublicKey, opts ...serverOpt) *testServer {
	t.Helper()
	s := &testServer{t: t, home: t.TempDir(), authorized: map[string]bool{}}
	for _, k := range authorized {
		s.authorized[string(k.Marshal())] = true
	}
	for _, o := range opts {
		o(s)
	}
	if len(s.hostKeys) == 0 {
		s.hostKeys = []ssh.Signer{newSigner(t)}
	}
	if s.listen == "" {
		s.listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		t.Skipf("listen %s: %v", s.listen, err)
	}
	s.ln = ln
	s.port = ln.Addr().(*net.TCPAddr).Port
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		ln.Close()
		s.connMu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.connMu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *testServer) hostKey() ssh.PublicKey { return s.hostKeys[0].PublicKey() }

func (s *testServer) serverConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.authMu.Lock()
			defer s.authMu.Unlock()
			if s.authorized[string(key.Marshal())] {
				return nil, nil
			}
			return nil, errors.New("not authorized")
		},
		MaxAuthTries: 6,
	}
	for _, k := range s.hostKeys {
		cfg.AddHostKey(k)
	}
	return cfg
}

func (s *testServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if s.dropFirst.Add(-1) >= 0 {
			c.Close()
			continue
		}
		s.connMu.Lock()
		s.conns = append(s.conns, c)
		s.connMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

func (s *testServer) handle(c net.Conn) {
	defer c.Close()
	n := s.inHandshake.Add(1)
	for {
		m := s.maxHandshake.Load()
		if n <= m || s.maxHandshake.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(s.handshakeDelay)
	// Counted from accept to here: strictly inside the client's handshake.
	s.inHandshake.Add(-1)
	sc, chans, reqs, err := ssh.NewServerConn(c, s.serverConfig())
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.session(ch, creqs)
			}()
		case "direct-tcpip":
			s.directTCPIP.Add(1)
			var p struct {
				Host     string
				Port     uint32
				OrigHost string
				OrigPort uint32
			}
			if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
				nc.Reject(ssh.ConnectionFailed, "bad payload")
				continue
			}
			tc, err := net.Dial("tcp", net.JoinHostPort(p.Host, strconv.Itoa(int(p.Port))))
			if err != nil {
				msg := err.Error()
				if errors.Is(err, syscall.ECONNREFUSED) {
					msg = "Connection refused"
				}
				nc.Reject(ssh.ConnectionFailed, msg)
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				tc.Close()
				continue
			}
			go ssh.DiscardRequests(creqs)
			wg.Add(1)
			go func() {
				defer wg.Done()
				done := make(chan struct{}, 2)
				go func() { io.Copy(tc, ch); tc.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(ch, tc); ch.CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
				ch.Close()
				tc.Close()
			}()
		default:
			nc.Reject(ssh.UnknownChannelType, "unsupported")
		}
	}
}

func (s *testServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		s.execMu.Lock()
		s.execs = append(s.execs, p.Command)
		s.execMu.Unlock()
		cmd := exec.Command("/bin/sh", "-c", p.Command)
		path := os.Getenv("PATH")
		if s.pathFirst != "" {
			path = s.pathFirst + ":" + path
		}
		cmd.Env = []string{"HOME=" + s.home, "PATH=" + path}
		cmd.Dir = s.home
		cmd.SysProcAttr = s.cred
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
		cmd.WaitDelay = 10 * time.Second
		code := 0
		if err := cmd.Run(); err != nil {
			code = 255
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
		}
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
		return
	}
}

func (s *testServer) execCount() int {
	s.execMu.Lock()
	defer s.execMu.Unlock()
	return len(s.execs)
}

// --- keys and client-side environment ---

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	s, err := ssh.NewSignerFromKey(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newECDSASigner(t *testing.T) ssh.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pubOf(t *testing.T, k ed25519.PrivateKey) ssh.PublicKey {
	t.Helper()
	p, err := ssh.NewPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeKey writes k as an OpenSSH private key file (encrypted with
// passphrase if it is not "").
func writeKey(t *testing.T, path string, k ed25519.PrivateKey, passphrase string) {
	t.Helper()
	var blk *pem.Block
	var err error
	if passphrase == "" {
		blk, err = ssh.MarshalPrivateKey(k, "test")
	} else {
		blk, err = ssh.MarshalPrivateKeyWithPassphrase(k, "test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
}

// testEnv is a client side: a home directory, an ssh config and a log.
type testEnv struct {
	t    *testing.T
	home string
	cfg  string

	logMu sync.Mutex
	logs  []string
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	e := &testEnv{t: t, home: t.TempDir()}
	e.cfg = filepath.Join(e.home, "ssh_config")
	e.writeConfig("")
	return e
}

func (e *testEnv) writeConfig(text string) {
	e.t.Helper()
	if err := os.WriteFile(e.cfg, []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) knownHostsFile() string { return filepath.Join(e.home, ".ssh", "known_hosts") }

// addKnown appends a known_hosts line for names (host:port) and key.
func (e *testEnv) addKnown(names []string, key ssh.PublicKey) {
	e.t.Helper()
	e.appendKnown(knownhosts.Line(names, key))
}

func (e *testEnv) appendKnown(line string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(e.knownHostsFile()), 0o700); err != nil {
		e.t.Fatal(err)
	}
	f, err := os.OpenFile(e.knownHostsFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func (e *testEnv) log(format string, args ...any) {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	e.logs = append(e.logs, fmt.Sprintf(format, args...))
}

func (e *testEnv) logText() string {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return strings.Join(e.logs, "\n")
}

// dialer returns a Dialer on this environment; no agent unless o names one.
func (e *testEnv) dialer(o Options) *Dialer {
	e.t.Helper()
	o.Home = e.home
	o.ConfigFile = e.cfg
	if o.AgentSocket == "" {
		o.AgentSocket = "none"
	}
	if o.Log == nil {
		o.Log = e.log
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	d, err := NewDialer(o)
	if err != nil {
		e.t.Fatal(err)
	}
	d.retryBase = 5 * time.Millisecond
	return d
}

// hostBlock returns an ssh config block for alias -> s.
func hostBlock(alias string, s *testServer, extra ...string) string {
	b := fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n", alias, s.port)
	for _, x := range extra {
		b += "  " + x + "\n"
	}
	return b
}

func addr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// startAgent serves an ssh-agent holding keys on a unix socket.
func startAgent(t *testing.T, keys ...ed25519.PrivateKey) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kr := agent.NewKeyring()
	for _, k := range keys {
		if err := kr.Add(agent.AddedKey{PrivateKey: k, Comment: "agent-test-key"}); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				agent.ServeAgent(kr, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return sock
}

// run runs cmd on c and returns its output.
func run(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	return string(out)
}
