package launcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
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

// connectTimeout bounds how long the head waits for an srun-started agent
// to connect back.
const connectTimeout = 60 * time.Second

// SlurmStarter starts the agents of the hosts that are not this machine
// through one srun step inside the allocation (one task per node,
// --overlap, --kill-on-bad-exit). The agents connect back to the head over
// TLS (see DialHead): the head listens on the one address the agents dial
// (--iface's, else this node's address on its default route), shows a
// certificate made for this job, whose fingerprint the agents get in
// srun's environment, and accepts an agent only with a proof of the job's
// agent key bound to its TLS session; the control protocol then runs over
// that connection.
type SlurmStarter struct {
	exe    string
	iface  string   // --iface: the head listens on its address
	nodes  []string // the hosts srun starts agents on, in plan order
	stderr io.Writer

	once sync.Once
	err  error
	door *agentDoor
	srun *exec.Cmd
	dead chan struct{} // closed when srun ends
	why  string        // srun's exit, once dead is closed
}

var _ Starter = (*SlurmStarter)(nil)

// NewSlurmStarter returns a starter for the plan's hosts that are not this
// machine; exe is the gorun binary on the nodes (the same path: Slurm
// clusters share their file systems); iface is --iface, the interface
// whose address the agents dial ("" for the one of the default route).
func NewSlurmStarter(exe string, plan *Plan, iface string, stderr io.Writer) *SlurmStarter {
	s := &SlurmStarter{exe: exe, iface: iface, stderr: stderr, dead: make(chan struct{})}
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
		ip, err := listenAddr(s.iface)
		if err != nil {
			s.err = fmt.Errorf("listen for agents: %w", err)
			return
		}
		if s.door, s.err = openAgentDoor(ip, len(s.nodes), s.stderr); s.err != nil {
			return
		}
		cmd := exec.Command("srun", SrunArgs(s.exe, s.nodes, s.door.ln.Addr().String())...)
		cmd.Env = append(os.Environ(), s.door.env()...)
		// srun says "cluster configuration lacks support for cpu
		// binding" where the cluster has no task/affinity: harmless for
		// --cpu-bind=none, and not for the job's output.
		quiet := &lineFilter{w: s.stderr, drop: "lacks support for cpu binding"}
		cmd.Stdout, cmd.Stderr = quiet, quiet
		// SIGTERM, which srun turns into cancelling the step, if the head
		// dies; its own group keeps the terminal's Ctrl-C to the head.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			s.door.close()
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
			s.door.close() // its summary of refusals, before the head may end
			close(s.dead)
		}()
	})
	return s.err
}

// agentDoor is where connect-back agents come in (srun's, a per-node
// launch's): a listener, the job's agent key and certificate, and the
// agents that proved themselves, by node name, until StartAgent takes
// them.
type agentDoor struct {
	ln  net.Listener
	key []byte
	id  *headIdentity

	mu      sync.Mutex
	waiting map[string]chan net.Conn
	arrived map[string]net.Conn
	refused refusals
	served  chan struct{} // closed once serving ended and the refusals are summed up
}

// openAgentDoor listens on ip for the agents of nodes nodes, with a fresh
// key and certificate, and serves them until close.
func openAgentDoor(ip string, nodes int, stderr io.Writer) (*agentDoor, error) {
	d := &agentDoor{key: make([]byte, 32), waiting: map[string]chan net.Conn{}, arrived: map[string]net.Conn{}, served: make(chan struct{})}
	d.refused.w = stderr
	if _, err := rand.Read(d.key); err != nil {
		return nil, err
	}
	var err error
	if d.id, err = newHeadIdentity(); err != nil {
		return nil, err
	}
	if d.ln, err = net.Listen("tcp", net.JoinHostPort(ip, "0")); err != nil {
		return nil, fmt.Errorf("listen for agents on %s: %w", ip, err)
	}
	go func() {
		defer close(d.served)
		serveAgents(d.ln, d.id, d.key, newDoor(nodes, &d.refused), d.arrive)
		d.refused.summary()
	}()
	return d, nil
}

// env is what an agent needs to come in: the key and the certificate's
// fingerprint, as variables (see DialHead).
func (d *agentDoor) env() []string {
	return []string{AgentKeyEnv + "=" + hex.EncodeToString(d.key), HeadCertEnv + "=" + d.id.fingerprint}
}

// close stops taking agents, and returns once the refusals are summed up;
// the agents that came in keep their connections.
func (d *agentDoor) close() {
	d.ln.Close()
	<-d.served
}

// serveAgents accepts agents' connections on ln until it is closed, runs
// the head's side of the connect-back on each that d admits (d bounds the
// handshakes in flight: door.go), and hands each agent that proved itself
// to arrive, once out of flight (so that no flood closes it) and told so.
// Refusals go to d's refusals, which say the first and count the rest.
func serveAgents(ln net.Listener, id *headIdentity, key []byte, d *door, arrive func(node string, c net.Conn)) {
	refuse := func(c net.Conn, err error) {
		d.refused.add(c.RemoteAddr(), refusal(c, err))
		c.Close()
	}
	d.serve(ln, func(c net.Conn) func() {
		node, t, err := acceptAgent(c, id, key)
		if err != nil {
			refuse(c, err)
			return nil
		}
		return func() {
			if err := welcomeAgent(t); err != nil {
				refuse(c, err)
				return
			}
			arrive(node, t)
		}
	})
}

// arrive hands an agent's connection to the StartAgent waiting for its
// node, or keeps it for the one to come.
func (d *agentDoor) arrive(node string, c net.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch := d.waiting[node]; ch != nil {
		delete(d.waiting, node)
		ch <- c
		return
	}
	if _, dup := d.arrived[node]; dup {
		d.refused.add(c.RemoteAddr(), "a second agent for node "+node)
		c.Close()
		return
	}
	d.arrived[node] = c
}

// wait returns node's agent once it came in. dead closes when the agents
// can no longer come (why says why); limit bounds the wait, from since.
func (d *agentDoor) wait(ctx context.Context, node string, dead <-chan struct{}, why func() string, limit time.Duration, since string) (*tls.Conn, error) {
	ch := make(chan net.Conn, 1)
	d.mu.Lock()
	if c := d.arrived[node]; c != nil {
		delete(d.arrived, node)
		ch <- c
	} else {
		d.waiting[node] = ch
	}
	d.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case c := <-ch:
		return c.(*tls.Conn), nil
	case <-dead:
		// A connection may have won the race with the end.
		select {
		case c := <-ch:
			return c.(*tls.Conn), nil
		default:
		}
		return nil, fmt.Errorf("%s: its agent did not connect (%s)", node, why())
	case <-t.C:
		return nil, fmt.Errorf("%s: its agent did not connect within %v of %s", node, limit, since)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// refusals reports the connections the head refused on its agents' port:
// the first at once, the others counted and summed up in one line by
// summary, so that a flood does not fill the job's stderr.
type refusals struct {
	mu     sync.Mutex
	w      io.Writer
	what   string // what was refused a connection to; "" = the agents' port
	n      int
	last   string
	shown  bool
	summed bool
}

// add reports one refusal of a connection from from (nil: before it was
// accepted) for why.
func (r *refusals) add(from net.Addr, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from != nil {
		why = "from " + from.String() + ": " + why
	}
	if !r.shown {
		r.shown = true
		fmt.Fprintf(r.w, "gorun: refused a connection to %s %s (any more are counted, and summed up at the end)\n", cmp.Or(r.what, "the agents' port"), why)
		return
	}
	r.n++
	r.last = why
}

// summary writes the count of the refusals after the first, once.
func (r *refusals) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 && !r.summed {
		r.summed = true
		fmt.Fprintf(r.w, "gorun: refused %d more connections to %s (the last %s)\n", r.n, cmp.Or(r.what, "the agents' port"), r.last)
	}
}

// StartAgent returns the agent of host once it connected back.
func (s *SlurmStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	if err := s.start(); err != nil {
		return nil, err
	}
	c, err := s.door.wait(ctx, host.Name, s.dead, func() string { return s.why }, connectTimeout, "srun's start")
	if err != nil {
		return nil, err
	}
	return &tcpAgent{c: c, dead: s.dead}, nil
}

// tcpAgent is a connected-back agent's connection.
type tcpAgent struct {
	c    *tls.Conn
	dead <-chan struct{} // closed when whatever started the agents is gone (srun)
	once sync.Once
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
	case <-a.dead:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// Kill drops the connection: the agent sees EOF and stops its ranks.
func (a *tcpAgent) Kill() error {
	a.once.Do(func() { a.c.Close() })
	return nil
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
