package launcher

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/hostfile"
)

// AgentKeyEnv carries the key an agent started by srun proves itself with
// when it connects back to the head. It is in srun's environment, never
// on a command line (which every user of a node can read).
const AgentKeyEnv = "GORUN_AGENT_KEY"

// connectTimeout bounds how long the head waits for an srun-started agent
// to connect back.
const connectTimeout = 60 * time.Second

// SlurmStarter starts the agents of the hosts that are not this machine
// through one srun step inside the allocation (one task per node,
// --overlap, --kill-on-bad-exit). The agents connect back to the head over
// TCP and prove themselves with a key only the head and srun's environment
// hold; the control protocol then runs over that connection.
type SlurmStarter struct {
	exe    string
	nodes  []string // the hosts srun starts agents on, in plan order
	stderr io.Writer

	once sync.Once
	err  error
	ln   net.Listener
	key  []byte
	srun *exec.Cmd
	dead chan struct{} // closed when srun ends
	why  string        // srun's exit, once dead is closed

	mu      sync.Mutex
	waiting map[string]chan net.Conn
	arrived map[string]net.Conn
}

var _ Starter = (*SlurmStarter)(nil)

// NewSlurmStarter returns a starter for the plan's hosts that are not this
// machine; exe is the gorun binary on the nodes (the same path: Slurm
// clusters share their file systems).
func NewSlurmStarter(exe string, plan *Plan, stderr io.Writer) *SlurmStarter {
	s := &SlurmStarter{exe: exe, stderr: stderr, dead: make(chan struct{}),
		waiting: map[string]chan net.Conn{}, arrived: map[string]net.Conn{}}
	for _, n := range plan.Nodes {
		if !IsLocal(n.Host.Name) {
			s.nodes = append(s.nodes, n.Host.Name)
		}
	}
	return s
}

// SrunArgs returns srun's arguments that start one agent on each of nodes:
// the form that works on Slurm 22.05 (see the man page's SLURM section).
func SrunArgs(exe string, nodes []string, connect string) []string {
	n := strconv.Itoa(len(nodes))
	return []string{"--overlap", "--kill-on-bad-exit=1", "--cpu-bind=none", "--input=none",
		"--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--nodelist=" + strings.Join(nodes, ","),
		"--job-name=gorun-agents", exe, "agent", "--connect", connect}
}

// start listens and runs srun, once.
func (s *SlurmStarter) start() error {
	s.once.Do(func() {
		s.key = make([]byte, 32)
		if _, err := rand.Read(s.key); err != nil {
			s.err = err
			return
		}
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			s.err = fmt.Errorf("listen for agents: %w", err)
			return
		}
		s.ln = ln
		port := ln.Addr().(*net.TCPAddr).Port
		cmd := exec.Command("srun", SrunArgs(s.exe, s.nodes, headAddrs(port))...)
		cmd.Env = append(os.Environ(), AgentKeyEnv+"="+hex.EncodeToString(s.key))
		// srun says "cluster configuration lacks support for cpu
		// binding" where the cluster has no task/affinity: harmless for
		// --cpu-bind=none, and not for the job's output.
		quiet := &lineFilter{w: s.stderr, drop: "lacks support for cpu binding"}
		cmd.Stdout, cmd.Stderr = quiet, quiet
		// SIGTERM, which srun turns into cancelling the step, if the head
		// dies; its own group keeps the terminal's Ctrl-C to the head.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			ln.Close()
			s.err = fmt.Errorf("start agents with srun: %w", err)
			return
		}
		s.srun = cmd
		go func() {
			err := cmd.Wait()
			s.why = "srun exited"
			if err != nil {
				s.why = "srun: " + err.Error()
			}
			close(s.dead)
			ln.Close()
		}()
		go s.accept()
	})
	return s.err
}

// headAddrs lists the addresses agents may reach the head at: its
// interfaces' (non-loopback first), then loopback, with port.
func headAddrs(port int) string {
	var out, loop []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil {
			continue
		}
		hp := net.JoinHostPort(n.IP.String(), strconv.Itoa(port))
		if n.IP.IsLoopback() {
			loop = append(loop, hp)
		} else {
			out = append(out, hp)
		}
	}
	if len(loop) == 0 {
		loop = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	}
	return strings.Join(append(out, loop...), ",")
}

// accept takes agents' connections and hands each, once it proved itself,
// to the StartAgent waiting for its node.
func (s *SlurmStarter) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			node, err := acceptAgent(c, s.key)
			if err != nil {
				fmt.Fprintf(s.stderr, "gorun: refused a connection from %s: %v\n", c.RemoteAddr(), err)
				c.Close()
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if ch := s.waiting[node]; ch != nil {
				delete(s.waiting, node)
				ch <- c
				return
			}
			if _, dup := s.arrived[node]; dup {
				fmt.Fprintf(s.stderr, "gorun: refused a second agent for node %s\n", node)
				c.Close()
				return
			}
			s.arrived[node] = c
		}()
	}
}

// StartAgent returns the agent of host once it connected back.
func (s *SlurmStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	if err := s.start(); err != nil {
		return nil, err
	}
	ch := make(chan net.Conn, 1)
	s.mu.Lock()
	if c := s.arrived[host.Name]; c != nil {
		delete(s.arrived, host.Name)
		ch <- c
	} else {
		s.waiting[host.Name] = ch
	}
	s.mu.Unlock()
	t := time.NewTimer(connectTimeout)
	defer t.Stop()
	select {
	case c := <-ch:
		return &tcpAgent{c: c.(*net.TCPConn), starter: s}, nil
	case <-s.dead:
		// A connection may have won the race with srun's end.
		select {
		case c := <-ch:
			return &tcpAgent{c: c.(*net.TCPConn), starter: s}, nil
		default:
		}
		return nil, fmt.Errorf("%s: its agent did not connect (%s)", host.Name, s.why)
	case <-t.C:
		return nil, fmt.Errorf("%s: its agent did not connect within %v of srun's start", host.Name, connectTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tcpAgent is an srun-started agent's connection.
type tcpAgent struct {
	c       *net.TCPConn
	starter *SlurmStarter
	once    sync.Once
}

func (a *tcpAgent) Read(p []byte) (int, error)  { return a.c.Read(p) }
func (a *tcpAgent) Write(p []byte) (int, error) { return a.c.Write(p) }
func (a *tcpAgent) Close() error                { return a.c.CloseWrite() }
func (a *tcpAgent) Remote() bool                { return true }

// Wait waits for the agent to close its end, then for srun (which ends
// when every agent did) a short while.
func (a *tcpAgent) Wait() error {
	io.Copy(io.Discard, a.c)
	a.once.Do(func() { a.c.Close() })
	select {
	case <-a.starter.dead:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// Kill drops the connection: the agent sees EOF and stops its ranks.
func (a *tcpAgent) Kill() error {
	a.once.Do(func() { a.c.Close() })
	return nil
}

// The connect-back handshake: the head sends a nonce, the agent answers
// with its node name and HMAC-SHA256(key, nonce, node).
const (
	helloPrefix = "GORUN-HEAD "
	agentPrefix = "GORUN-AGENT "
)

func agentMAC(key []byte, nonce, node string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(nonce + "\x00" + node))
	return m.Sum(nil)
}

// acceptAgent runs the head's side of the handshake and returns the node
// the agent proved to be.
func acceptAgent(c net.Conn, key []byte) (string, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	var nb [16]byte
	rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	if _, err := io.WriteString(c, helloPrefix+nonce+"\n"); err != nil {
		return "", err
	}
	line, err := readLine(c, 512)
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(line, agentPrefix)
	node, macHex, ok2 := strings.Cut(rest, " ")
	mac, err := hex.DecodeString(macHex)
	if !ok || !ok2 || node == "" || err != nil {
		return "", errors.New("not a gorun agent")
	}
	if !hmac.Equal(mac, agentMAC(key, nonce, node)) {
		return "", errors.New("wrong key")
	}
	return node, nil
}

// readLine reads one line of at most max bytes, byte by byte, so that
// nothing after it is consumed.
func readLine(r io.Reader, max int) (string, error) {
	var b []byte
	var one [1]byte
	for len(b) < max {
		if _, err := io.ReadFull(r, one[:]); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
	return "", errors.New("line too long")
}

// HostOf is the IP address of a TCP address, as text.
func HostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, _ := net.SplitHostPort(a.String())
	return host
}

// SlurmNodeName is the name of the Slurm node this runs on
// (SLURMD_NODENAME in a step), else the host name: what the allocation's
// nodelist calls it.
func SlurmNodeName() string {
	if n := os.Getenv("SLURMD_NODENAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

// DialHead is an srun-started agent's side: it connects to the first of
// addrs (comma-separated host:port) that answers, preferring the address
// of the node that ran srun (SLURM_LAUNCH_NODE_IPADDR), proves itself as
// node with the key from GORUN_AGENT_KEY (and removes it from the
// environment, so that ranks do not inherit it), and returns the
// connection for the control protocol.
func DialHead(addrs, node string) (net.Conn, error) {
	keyHex := os.Getenv(AgentKeyEnv)
	os.Unsetenv(AgentKeyEnv)
	key, err := hex.DecodeString(keyHex)
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("no agent key in $%s", AgentKeyEnv)
	}
	list := strings.Split(addrs, ",")
	if ip := os.Getenv("SLURM_LAUNCH_NODE_IPADDR"); ip != "" && len(list) > 0 {
		_, port, _ := net.SplitHostPort(list[0])
		list = append([]string{net.JoinHostPort(ip, port)}, list...)
	}
	var errs []error
	for _, a := range list {
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := proveAgent(c, key, node); err != nil {
			c.Close()
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		return c, nil
	}
	return nil, fmt.Errorf("reach the head: %w", errors.Join(errs...))
}

func proveAgent(c net.Conn, key []byte, node string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	line, err := readLine(c, 256)
	if err != nil {
		return err
	}
	nonce, ok := strings.CutPrefix(line, helloPrefix)
	if !ok {
		return errors.New("not a gorun head")
	}
	_, err = io.WriteString(c, agentPrefix+node+" "+hex.EncodeToString(agentMAC(key, nonce, node))+"\n")
	return err
}

// lineFilter passes whole lines to w, except those containing drop.
type lineFilter struct {
	mu   sync.Mutex
	w    io.Writer
	drop string
	buf  []byte
}

func (f *lineFilter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = append(f.buf, p...)
	for {
		i := strings.IndexByte(string(f.buf), '\n')
		if i < 0 {
			break
		}
		line := f.buf[:i+1]
		if !strings.Contains(string(line), f.drop) {
			f.w.Write(line)
		}
		f.buf = f.buf[i+1:]
	}
	return len(p), nil
}
