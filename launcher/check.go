package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
)

// CheckOptions configures [Check].
type CheckOptions struct {
	Hosts   []hostfile.Host
	Program string // resolve this program on every host; "" = none
	Fanout  int
	SSH     control.SSH
	Starter Starter // nil: local for this machine, SSH for the others
	Out     io.Writer
	Version string
	// BeatTimeout: a remote host silent this long is lost; 0 = 5 s.
	BeatTimeout time.Duration
}

// HostCheck is what `gorun check` learned about one host.
type HostCheck struct {
	Host       string                `json:"host"`
	OK         bool                  `json:"ok"`
	Err        string                `json:"error,omitempty"`
	Latency    time.Duration         `json:"latency_ns"` // from connecting to the agent's hello
	Version    string                `json:"version,omitempty"`
	Cores      int                   `json:"cores,omitempty"`
	GPUs       int                   `json:"gpus,omitempty"`
	Program    string                `json:"program,omitempty"`
	ProgramErr string                `json:"program_error,omitempty"`
	Addrs      []string              `json:"addrs,omitempty"`
	Reach      []control.CheckResult `json:"reach,omitempty"`
}

// Check is `gorun check`: a preflight that starts an agent on every host in
// parallel, as a job would, and reports per host how long that took, the
// gorun version, CPU and GPU counts, where the program resolves, and which
// hosts reach each other's agents over TCP on which interface. It returns
// an error naming the hosts that failed.
//
// Cancelling ctx ends the check where it is: agents still starting are
// killed, answers are no longer awaited, the agents are shut down, and
// Check returns what it learned with an error wrapping ctx.Err().
func Check(ctx context.Context, o CheckOptions) ([]HostCheck, error) {
	c, err := newChecker(o)
	if err != nil {
		return nil, err
	}
	defer close(c.h.done)
	c.start(ctx)
	defer c.h.stopAgents()
	ports := c.programs(ctx)
	c.probe(ctx, ports)
	return c.res, c.verdict(ctx)
}

// checker runs `gorun check` with a head of its own, which starts the
// agents and reads their answers.
type checker struct {
	o   CheckOptions
	h   *head
	res []HostCheck // by node
}

func newChecker(o CheckOptions) (*checker, error) {
	plan, err := NewPlan(o.Hosts, PlanOptions{NPerNode: 1})
	if err != nil {
		return nil, err
	}
	ro := Options{Hosts: o.Hosts, Fanout: treeFanoutFor(o.Fanout, len(o.Hosts)), SSH: absPaths(o.SSH), Starter: o.Starter, Stderr: os.Stderr, Stdout: o.Out,
		Version: o.Version, BeatTimeout: o.BeatTimeout}
	if ro.Starter == nil {
		if ro.Starter, err = defaultStarter(ro, plan); err != nil {
			return nil, err
		}
	}
	h := &head{o: ro, plan: plan, events: make(chan event, 256), done: make(chan struct{})}
	return &checker{o: o, h: h, res: make([]HostCheck, len(plan.Nodes))}, nil
}

// start starts every host's agent, and records how long each took and
// what its hello said, or why it did not start.
func (c *checker) start(ctx context.Context) {
	res := c.res
	starts := make([]time.Time, len(c.h.plan.Nodes))
	for i, n := range c.h.plan.Nodes {
		res[i].Host = n.Host.Name
		starts[i] = time.Now()
	}
	startErr := c.h.startAgents(ctx)
	for i, a := range c.h.agents {
		if a == nil || a.hello.Proto == 0 {
			res[i].Err = "no agent"
			continue
		}
		res[i].OK, res[i].Version, res[i].Cores = true, a.hello.Version, a.hello.Cores
		res[i].Latency = a.upAt.Sub(starts[i])
	}
	if startErr != nil {
		for _, e := range splitJoined(startErr) {
			// The error names its host, as the table does (FormatCheck
			// prints "HOST: ERR"): once is enough.
			var ne *nodeError
			if errors.As(e, &ne) && !res[ne.node].OK {
				res[ne.node].Err = strings.TrimPrefix(ne.Error(), res[ne.node].Host+": ")
			}
		}
	}
}

// programs is the first phase: every agent resolves the program and
// opens a probe listener. It returns the answers by node.
func (c *checker) programs(ctx context.Context) map[int]control.CheckReply {
	dir, _ := os.Getwd()
	ports := c.ask(ctx, func(int) *control.Check { return &control.Check{Program: c.o.Program, Dir: dir} })
	for i, r := range ports {
		c.res[i].Program, c.res[i].ProgramErr, c.res[i].Addrs, c.res[i].GPUs = r.Program, r.ProgramErr, r.Addrs, r.GPUs
		if c.o.Program != "" && r.ProgramErr != "" {
			c.res[i].OK = false
		}
	}
	return ports
}

// probe is the second phase: every agent probes every other agent's
// listener.
func (c *checker) probe(ctx context.Context, ports map[int]control.CheckReply) {
	probes := c.ask(ctx, func(i int) *control.Check { return c.peersOf(i, ports) })
	for i, r := range probes {
		c.res[i].Reach = r.Probes
		sort.Slice(c.res[i].Reach, func(a, b int) bool { return c.res[i].Reach[a].Node < c.res[i].Reach[b].Node })
		for _, p := range r.Probes {
			if !p.OK {
				c.res[i].OK = false
			}
		}
	}
}

// peersOf is node i's probe question: every other agent's listener.
func (c *checker) peersOf(i int, ports map[int]control.CheckReply) *control.Check {
	q := &control.Check{}
	for j, r := range ports {
		if j != i && r.Port != 0 {
			addr := c.h.agents[j].hello.ConnAddr
			if addr == "" {
				// j is this machine: i reaches it at the address i's
				// own connection came from, if i is remote.
				addr = c.h.agents[i].hello.ClientAddr
			}
			if addr == "" {
				addr = "127.0.0.1"
			}
			q.Peers = append(q.Peers, control.CheckPeer{Node: j, Addr: addr, Port: r.Port})
		}
	}
	return q
}

// ask sends q(i) to every host i that is still OK and collects the
// answers for 30 s at most, or until ctx ends; a host whose agent is lost
// meanwhile fails.
func (c *checker) ask(ctx context.Context, q func(i int) *control.Check) map[int]control.CheckReply {
	out := map[int]control.CheckReply{}
	n := 0
	for i, a := range c.h.agents {
		if c.res[i].OK {
			if m := q(i); m != nil && a.w.Send(control.TypeCheck, m) == nil {
				n++
			}
		}
	}
	timeout := time.After(30 * time.Second)
	for n > 0 {
		select {
		case e := <-c.h.events:
			switch e := e.(type) {
			case checkReply:
				out[e.node] = e.CheckReply
				n--
			case agentLost:
				c.res[e.node].OK, c.res[e.node].Err = false, e.err.Error()
				n--
			}
		case <-timeout:
			return out
		case <-ctx.Done():
			return out
		}
	}
	return out
}

// verdict is Check's error: ctx's end, or the hosts that failed.
func (c *checker) verdict(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check cancelled: %w", err)
	}
	var bad []string
	for _, r := range c.res {
		if !r.OK {
			bad = append(bad, r.Host)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d hosts failed the check: %s", len(bad), len(c.res), strings.Join(bad, ", "))
	}
	return nil
}

func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// FormatCheck prints check results as a table.
func FormatCheck(w io.Writer, res []HostCheck) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "host\tstatus\tagent up\tgorun\tcpus\tgpus\tprogram\treaches")
	for i, r := range res {
		status := "ok"
		if !r.OK {
			status = "FAILED"
		}
		prog := r.Program
		if r.ProgramErr != "" {
			prog = r.ProgramErr
		}
		var reach []string
		for _, p := range r.Reach {
			name := res[p.Node].Host
			if p.OK {
				reach = append(reach, fmt.Sprintf("%s via %s (%s)", name, p.Iface, p.Latency.Round(10*time.Microsecond)))
			} else {
				reach = append(reach, fmt.Sprintf("%s NOT: %s", name, p.Err))
			}
		}
		lat := "-"
		if r.Latency > 0 {
			lat = r.Latency.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Host, status, lat, r.Version, r.Cores, r.GPUs, prog, strings.Join(reach, "; "))
		_ = i
	}
	tw.Flush()
	for _, r := range res {
		if r.Err != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Host, r.Err)
		}
	}
}

// checkListener is the agent's probe listener for `gorun check`.
type checkListener struct {
	mu sync.Mutex
	l  net.Listener
}

// check answers a Check from the head.
func (a *agent) check(q control.Check) control.CheckReply {
	var rep control.CheckReply
	if q.Peers == nil {
		rep.GPUs = topology.LocalGPUs()
	}
	if q.Program != "" {
		path, _, msg := a.resolve(control.Launch{Argv: []string{q.Program}, Dir: q.Dir}, os.Environ())
		rep.Program, rep.ProgramErr = path, msg
	}
	if q.Peers == nil {
		a.probe.mu.Lock()
		if a.probe.l == nil {
			if l, err := net.Listen("tcp", ":0"); err == nil {
				a.probe.l = l
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						c.Write([]byte("gorun\n"))
						c.Close()
					}
				}()
			}
		}
		if a.probe.l != nil {
			rep.Port = a.probe.l.Addr().(*net.TCPAddr).Port
		}
		a.probe.mu.Unlock()
		ifs, _ := net.Interfaces()
		for _, ifc := range ifs {
			addrs, _ := ifc.Addrs()
			for _, ad := range addrs {
				if n, ok := ad.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
					rep.Addrs = append(rep.Addrs, ifc.Name+"="+n.IP.String())
				}
			}
		}
		return rep
	}
	var wg sync.WaitGroup
	rep.Probes = make([]control.CheckResult, len(q.Peers))
	for i, p := range q.Peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := control.CheckResult{Node: p.Node}
			t := time.Now()
			c, err := net.DialTimeout("tcp", net.JoinHostPort(p.Addr, strconv.Itoa(p.Port)), 5*time.Second)
			if err != nil {
				r.Err = err.Error()
			} else {
				buf := make([]byte, 6)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "gorun\n" {
					r.Err = fmt.Sprintf("no gorun agent answered at %s:%d", p.Addr, p.Port)
				} else {
					r.OK, r.Latency = true, time.Since(t)
					r.Iface = ifaceOf(c.LocalAddr().(*net.TCPAddr).IP)
				}
				c.Close()
			}
			rep.Probes[i] = r
		}()
	}
	wg.Wait()
	return rep
}

// ifaceOf names the interface that holds ip.
func ifaceOf(ip net.IP) string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok && n.IP.Equal(ip) {
				return ifc.Name
			}
		}
	}
	return ip.String()
}
