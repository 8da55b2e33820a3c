package launcher

// Per-node launch (--nnodes, --nproc-per-node, --rdzv-endpoint): a gorun
// is started on each node by something else (Kubernetes, a cloud's VM
// group, a scheduler's per-node task), with no SSH between the nodes, as
// torchrun is. They meet at the endpoint: the gorun on the node whose
// address the endpoint is listens there (as torchrun's c10d backend's
// host does) and is the job's head. Every node, that one too, joins it
// over the per-node wire (pernode_wire.go) and, when a round starts,
// starts its agent, which connects back to the head as srun's agents do
// (agentDoor). From there the job is any gorun job: plan, binding, PMI
// and the KV store, output, the first failure ending every rank, the
// summary, all on the endpoint's node; the other nodes exit with the
// job's status. Each node prints its own ranks' output (its agent does,
// on its gorun's stdout and stderr), as each node's torchrun prints its
// workers': every pod's log has its ranks'; the endpoint's node prints
// its own, and --output-filename's files are written there.
//
// Elastic (--nnodes MIN:MAX): a round starts when MAX nodes have joined,
// or MIN and then --rdzv-last-call passed. A lost node (its gorun killed,
// its link cut, or a signal to it) ends the round; the nodes left and
// those that joined since meet again, and the job restarts with the new
// world while --max-restarts lasts. Nodes that join during a round wait
// for the next.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/internal/selfcert"
)

// PerNode is this node's part of a per-node launch.
type PerNode struct {
	Endpoint string // --rdzv-endpoint HOST:PORT
	ID       string // --rdzv-id ("" = none)
	Token    []byte // the secret the nodes share (ReadToken)
	// MinNodes and MaxNodes are --nnodes: N is N:N; MIN:MAX is elastic.
	MinNodes, MaxNodes int
	NProc              int           // --nproc-per-node: this node's ranks
	LastCall           time.Duration // --rdzv-last-call
	Timeout            time.Duration // --rdzv-timeout: to meet, at each round
	Exe                string        // the gorun binary the agents run; "" = this one
}

// Elastic reports whether membership may change during the job.
func (p *PerNode) Elastic() bool { return p.MinNodes != p.MaxNodes }

// ParseNNodes reads --nnodes: N or MIN:MAX.
func ParseNNodes(s string) (min, max int, err error) {
	lo, hi, elastic := strings.Cut(s, ":")
	if min, err = strconv.Atoi(lo); err == nil {
		max = min
		if elastic {
			max, err = strconv.Atoi(hi)
		}
	}
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("--nnodes %q: want N or MIN:MAX", s)
	case min < 1 || max < min:
		return 0, 0, fmt.Errorf("--nnodes %q: want 1 <= MIN <= MAX", s)
	}
	return min, max, nil
}

// TokenEnv holds the per-node launch's token when no file names it.
const TokenEnv = "GORUN_RDZV_TOKEN"

// minTokenBits is the least a per-node launch's token must hold, as
// tokenBits estimates it: a node's proof of the token reaches whoever
// answers at the endpoint, a squatter of its port included, who can try
// guesses against it offline, as fast as HMAC-SHA256 runs. 2^128 of them
// are out of anyone's reach.
const minTokenBits = 128

// tokenHowTo says how to make a token that is strong enough.
const tokenHowTo = "make one with: openssl rand -hex 32"

// ReadToken returns the token from file (--rdzv-token-file), else from
// $GORUN_RDZV_TOKEN; surrounding white space is not part of it. A token
// that tokenBits puts below minTokenBits is an error that says how to
// make one.
func ReadToken(file string, getenv func(string) string) ([]byte, error) {
	var tok, from string
	switch {
	case file != "":
		b, err := readBounded(file, maxToken+64)
		if err != nil {
			return nil, fmt.Errorf("--rdzv-token-file: %w", err)
		}
		tok, from = strings.TrimSpace(string(b)), "--rdzv-token-file "+file
		if tok == "" {
			return nil, fmt.Errorf("--rdzv-token-file %s: empty (%s)", file, tokenHowTo)
		}
	case getenv(TokenEnv) != "":
		tok, from = strings.TrimSpace(getenv(TokenEnv)), "$"+TokenEnv
	default:
		return nil, fmt.Errorf("a per-node launch needs the token its nodes share: --rdzv-token-file FILE or $%s (%s)", TokenEnv, tokenHowTo)
	}
	if err := checkToken([]byte(tok)); err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return []byte(tok), nil
}

// maxToken is the longest token taken, in bytes: a token file is a line,
// and tokenBits's work grows with the square of the length.
const maxToken = 4096

// readBounded reads file, or its first max bytes.
func readBounded(file string, max int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// checkToken refuses a token below minTokenBits, or longer than
// maxToken, saying why without saying the token.
func checkToken(tok []byte) error {
	if len(tok) > maxToken {
		return fmt.Errorf("the per-node launch's token is longer than %d bytes: not a token (%s)", maxToken, tokenHowTo)
	}
	if bits := tokenBits(string(tok)); bits < minTokenBits {
		return fmt.Errorf("the per-node launch's token is too weak to share over the network: %d characters worth about %.0f bits, as gorun estimates them, and it needs at least %d, so that nobody can guess it from what a node sends (%s, or head -c 32 /dev/urandom | base64)",
			len(tok), bits, minTokenBits, tokenHowTo)
	}
	return nil
}

// tokenBits estimates how many bits of chance a token holds, as an
// attacker who knows how tokens are made would count them: each
// character is worth log2 of the smallest of these alphabets that holds
// every character of the token: decimal digits (10), hexadecimal digits
// (16), the digits and the letters of one case (36), the digits and the
// letters of both cases (62), base64 (64, its '=' padding at the end not
// counted), printable ASCII and anything else (95). A repeat counts one
// character whatever its length: a run of tokenRun or more characters
// that each step by -1, 0 or +1 from the one before ("aaaaaa", "123456",
// "fedcba"), or a string of tokenRun or more that already appeared
// earlier in the token ("trustno1trustno1"). It cannot know how the token
// was made: a passphrase of words reads as more than it holds. What
// generators make passes: `openssl rand -hex 16` has 128 bits (a repeat
// in it, one time in about ten thousand, makes it fall short), `-hex 32`
// 256, `-base64 32` 258.
func tokenBits(tok string) float64 {
	tok = strings.TrimRight(tok, "=")
	var digit, lower, upper, hexLetter, b64, other bool
	for _, c := range []byte(tok) {
		switch {
		case '0' <= c && c <= '9':
			digit = true
		case 'a' <= c && c <= 'z':
			lower, hexLetter = true, hexLetter || c > 'f'
		case 'A' <= c && c <= 'Z':
			upper, hexLetter = true, hexLetter || c > 'F'
		case c == '+' || c == '/' || c == '-' || c == '_':
			b64 = true
		default:
			other = true
		}
	}
	var alphabet float64
	switch {
	case other:
		alphabet = 95
	case b64:
		alphabet = 64
	case lower && upper:
		alphabet = 62
	case (lower || upper) && hexLetter:
		alphabet = 36
	case lower || upper:
		alphabet = 16
	case digit:
		alphabet = 10
	default:
		return 0
	}
	return float64(tokenLength(tok)) * math.Log2(alphabet)
}

// tokenRun is the length from which tokenBits counts a run or a repeat
// as one character.
const tokenRun = 6

// tokenLength is the number of characters of tok that tokenBits counts:
// each run or repeat of tokenRun characters or more counts one.
func tokenLength(tok string) int {
	n := 0
	for i := 0; i < len(tok); n++ {
		step := 1
		if k := runLength(tok[i:]); k >= tokenRun {
			step = k
		}
		if k := repeatLength(tok, i); k >= tokenRun && k > step {
			step = k
		}
		i += step
	}
	return n
}

// runLength is the length of the run at the start of s: characters that
// each differ by -1, 0 or +1 from the one before, by the same step.
func runLength(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	d := int(s[1]) - int(s[0])
	if d < -1 || d > 1 {
		return 1
	}
	k := 2
	for k < len(s) && int(s[k])-int(s[k-1]) == d {
		k++
	}
	return k
}

// repeatLength is the length of the longest string at tok[i:] that also
// starts at an earlier index of tok.
func repeatLength(tok string, i int) int {
	best := 0
	for j := 0; j < i; j++ {
		k := 0
		for i+k < len(tok) && tok[j+k] == tok[i+k] {
			k++
		}
		best = max(best, k)
	}
	return best
}

// RunPerNode runs this node's part of a per-node launch (Options.PerNode)
// and returns the job's exit code: on the endpoint's node it serves the
// endpoint and runs the job's head; elsewhere it joins the endpoint and
// runs this node's agent for each round.
func RunPerNode(ctx context.Context, o Options) (int, error) {
	p := *o.PerNode
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if len(o.Argv) == 0 {
		return ExitUsage, fmt.Errorf("%w: no program to run", ErrUsage)
	}
	if o.DryRun || o.PrintEnv >= 0 {
		return ExitUsage, fmt.Errorf("%w: --dry-run and --print-env need the job's nodes, which a per-node launch only knows once they meet: run them with -H or --hostfile", ErrUsage)
	}
	if p.NProc <= 0 {
		p.NProc = 1
	}
	if p.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return ExitLaunch, fmt.Errorf("find gorun's own binary: %w", err)
		}
		p.Exe = exe
	}
	host, _, err := net.SplitHostPort(p.Endpoint)
	if err != nil {
		return ExitUsage, fmt.Errorf("%w: --rdzv-endpoint %q: want HOST:PORT", ErrUsage, p.Endpoint)
	}
	if err := checkToken(p.Token); err != nil {
		return ExitUsage, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	ln, err := listenEndpoint(ctx, p.Endpoint)
	if _, ok := errors.AsType[*squatError](err); ok {
		return ExitLaunch, err
	}
	if err != nil {
		return ExitUsage, fmt.Errorf("%w: --rdzv-endpoint %s: %w", ErrUsage, p.Endpoint, err)
	}
	n := &nodeJoin{p: &p, argv: o.Argv, version: o.Version, stdout: o.Stdout, stderr: o.Stderr, agentHost: host}
	if ln == nil {
		return n.run(ctx)
	}
	// This node serves the endpoint, and joins it like every other.
	s, err := newNodeServer(ln, &p, o.Stderr)
	if err != nil {
		ln.Close()
		return ExitLaunch, err
	}
	defer s.close()
	n.self = s.self
	n.addr = ln.Addr().String()
	n.agentHost, _, _ = net.SplitHostPort(n.addr)
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		n.run(ctx)
	}()
	code, err := s.run(ctx, o)
	s.close()
	select {
	case <-joined:
	case <-time.After(o.Grace + 10*time.Second):
	}
	return code, err
}

// listenEndpoint listens on the endpoint when its host is an address of
// this machine and its port is free, and returns nil (join it) otherwise.
// A port of this machine that another user holds is an error: that is
// no gorun of this user's to join (see portSquatter).
func listenEndpoint(ctx context.Context, endpoint string) (net.Listener, error) {
	host, port, _ := net.SplitHostPort(endpoint)
	ips := []string{host}
	if net.ParseIP(host) == nil {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		if ips, err = net.DefaultResolver.LookupHost(lctx, host); err != nil {
			// Its name may appear later (a headless Service's record
			// comes with the pod): join, and retry there.
			return nil, nil
		}
	}
	for _, ip := range ips {
		if !IsLocal(ip) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
		if errors.Is(err, syscall.EADDRINUSE) {
			if err := portSquatter(procfs.Proc, ip, port, os.Geteuid()); err != nil {
				return nil, err
			}
			return nil, nil // served already, on this machine: join it
		}
		return ln, err
	}
	return nil, nil
}

// squatError is RunPerNode's error when another user of the endpoint's
// machine holds its port.
type squatError struct {
	endpoint string // HOST:PORT
	who      string // "user NAME (uid N)", or "uid N" without a name
}

func (e *squatError) Error() string {
	return fmt.Sprintf("the rendezvous endpoint %s is held by %s, not by a gorun of yours: choose another port with --rdzv-endpoint", e.endpoint, e.who)
}

// portSquatter is a *squatError, naming the user, when the TCP sockets
// of this machine (fs) that hold port on ip (bound to it, or to every
// address) are all another user's than uid me: then no gorun of this
// user's serves it, and joining it would only wait for --rdzv-timeout,
// or prove the token to a squatter. nil when one is this user's, or none
// can be seen (/proc unreadable, the holder gone meanwhile): join it.
func portSquatter(fs procfs.FS, ip, port string, me int) error {
	addr, err := netip.ParseAddr(ip)
	p, err2 := strconv.ParseUint(port, 10, 16)
	if err != nil || err2 != nil {
		return nil
	}
	addr = addr.WithZone("").Unmap()
	socks, err := fs.TCPSockets()
	if err != nil {
		return nil
	}
	other := -1
	for _, s := range socks {
		local := s.Local.Addr().Unmap()
		// A wildcard holds the port on every address of its family, and
		// IPv6's (dual stack) on IPv4's too.
		holds := local == addr || local.IsUnspecified() && (local.Is6() || addr.Is4())
		if s.Local.Port() != uint16(p) || s.Inode == 0 || !holds {
			continue
		}
		if s.UID == me {
			return nil
		}
		other = s.UID
	}
	if other < 0 {
		return nil
	}
	who := fmt.Sprintf("uid %d", other)
	if u, err := user.LookupId(strconv.Itoa(other)); err == nil {
		who = fmt.Sprintf("user %s (uid %d)", u.Username, other)
	}
	return &squatError{endpoint: net.JoinHostPort(ip, port), who: who}
}

// member is a node that joined the endpoint.
type member struct {
	l     *lineConn
	name  string // its name in the plan: its address as the endpoint sees it
	hello joinHello
	local bool // the endpoint's own node
	ready chan struct{}
	gone  chan struct{} // closed when its connection ends
	err   error         // why, once gone is closed
}

// nodeServer is the endpoint: it admits nodes, forms rounds and runs the
// job's head for each.
type nodeServer struct {
	p      *PerNode
	ln     net.Listener
	cert   tls.Certificate
	stderr io.Writer
	argv   []string

	mu      sync.Mutex
	lobby   []*member // joined and waiting for a round
	round   []*member // in the running round
	running bool
	names   map[string]int // members seen per address
	changed chan struct{}  // a node joined or left
	refused refusals
	closed  sync.Once
	self    string // what this node's own gorun says in its hello (joinHello.Self)
	jobID   string // the job's, in every round
}

func newNodeServer(ln net.Listener, p *PerNode, stderr io.Writer) (*nodeServer, error) {
	cert, _, err := selfcert.New("gorun endpoint")
	if err != nil {
		return nil, err
	}
	s := &nodeServer{p: p, ln: ln, cert: cert, stderr: stderr, names: map[string]int{}, changed: make(chan struct{}, 1), self: newSecret(), jobID: newJobID()}
	s.refused.w = stderr
	s.refused.what = "the endpoint"
	go s.serve()
	return s, nil
}

func (s *nodeServer) close() {
	s.closed.Do(func() {
		s.ln.Close()
		s.refused.summary()
	})
}

// serve admits nodes until the listener closes, with at most a door's
// handshakes in flight (door.go, newDoor: the job's MAX nodes and
// doorMargin more; from one address, MAX and at least doorMargin).
func (s *nodeServer) serve() {
	newDoor(s.p.MaxNodes, &s.refused).serve(s.ln, func(c net.Conn) func() {
		s.admit(c)
		return nil
	})
}

// admit runs the handshake with a node and puts it in the lobby.
func (s *nodeServer) admit(c net.Conn) {
	l, h, err := acceptNode(c, s.cert, s.p.Token)
	if err != nil && errors.Is(err, io.EOF) && strings.HasPrefix(err.Error(), "TLS handshake") {
		// Connected and closed without a byte: a port probe (a
		// Kubernetes TCP probe, a test waiting for the port), not a node.
		c.Close()
		return
	}
	if err != nil {
		s.refused.add(c.RemoteAddr(), refusal(c, err))
		c.Close()
		return
	}
	refuse := func(why string) {
		s.refused.add(c.RemoteAddr(), why)
		l.send(nodeMsg{Error: why})
		l.c.Close()
	}
	switch {
	case h.ID != s.p.ID:
		refuse(fmt.Sprintf("its --rdzv-id is %q, and this job's %q", h.ID, s.p.ID))
		return
	case h.Min != s.p.MinNodes || h.Max != s.p.MaxNodes:
		refuse(fmt.Sprintf("its --nnodes is %s, and this job's %s", nnodesText(h.Min, h.Max), nnodesText(s.p.MinNodes, s.p.MaxNodes)))
		return
	case h.NProc < 1:
		refuse("its --nproc-per-node is not a positive number")
		return
	}
	ip := HostOf(c.RemoteAddr())
	s.mu.Lock()
	if !s.p.Elastic() && (s.running || len(s.lobby) >= s.p.MaxNodes) {
		s.mu.Unlock()
		refuse(fmt.Sprintf("the job already has its %d nodes", s.p.MaxNodes))
		return
	}
	s.names[ip]++
	name := ip
	if k := s.names[ip]; k > 1 {
		name = fmt.Sprintf("%s#%d", ip, k)
	}
	m := &member{l: l, name: name, hello: h, ready: make(chan struct{}, 1), gone: make(chan struct{}),
		local: h.Self != "" && h.Self == s.self}
	s.lobby = append(s.lobby, m)
	running := s.running
	s.mu.Unlock()
	if s.argv != nil && !slices.Equal(h.Argv, s.argv) {
		fmt.Fprintf(s.stderr, "gorun: note: node %s (%s) was started with another program (%s); the endpoint's runs on every node\n",
			name, h.Host, strings.Join(h.Argv, " "))
	}
	if running {
		l.send(nodeMsg{Wait: "the job is running; this node joins it at its next restart"})
	} else {
		l.send(nodeMsg{Wait: "waiting for the other nodes"})
	}
	s.poke()
	go l.beat(nodeMsg{Beat: true}, m.gone)
	go s.listen(m)
}

// listen reads a member's lines until its connection ends.
func (s *nodeServer) listen(m *member) {
	for {
		var msg joinMsg
		if err := m.l.recv(&msg, rdzvSilence); err != nil {
			m.err = err
			if errors.Is(err, io.EOF) {
				m.err = errors.New("its gorun closed the connection")
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				m.err = fmt.Errorf("silent for %v", rdzvSilence)
			}
			m.l.c.Close()
			close(m.gone)
			s.mu.Lock()
			s.lobby = slices.DeleteFunc(s.lobby, func(o *member) bool { return o == m })
			s.mu.Unlock()
			s.poke()
			return
		}
		if msg.Ready {
			select {
			case m.ready <- struct{}{}:
			default:
			}
		}
	}
}

func (s *nodeServer) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func nnodesText(min, max int) string {
	if min == max {
		return strconv.Itoa(min)
	}
	return fmt.Sprintf("%d:%d", min, max)
}

// alive reports whether m's connection still stands.
func (m *member) alive() bool {
	select {
	case <-m.gone:
		return false
	default:
		return true
	}
}

// waitRound waits until enough nodes have joined and returns the round's:
// the endpoint's own node first, then those of the last round still
// there, then the others in the order they joined, up to MaxNodes.
func (s *nodeServer) waitRound(ctx context.Context, kept []*member) ([]*member, error) {
	deadline := time.NewTimer(s.p.Timeout)
	defer deadline.Stop()
	var lastCall <-chan time.Time
	for {
		s.mu.Lock()
		var all []*member
		for _, m := range kept {
			if m.alive() {
				all = append(all, m)
			}
		}
		for _, m := range s.lobby {
			if m.alive() && !slices.Contains(all, m) {
				all = append(all, m)
			}
		}
		s.mu.Unlock()
		slices.SortStableFunc(all, func(a, b *member) int {
			switch {
			case a.local == b.local:
				return 0
			case a.local:
				return -1
			}
			return 1
		})
		take := func() []*member {
			all = all[:min(len(all), s.p.MaxNodes)]
			s.mu.Lock()
			s.lobby = slices.DeleteFunc(s.lobby, func(m *member) bool { return slices.Contains(all, m) })
			s.round, s.running = all, true
			s.mu.Unlock()
			return all
		}
		if len(all) >= s.p.MaxNodes || len(all) >= s.p.MinNodes && s.p.LastCall <= 0 {
			return take(), nil
		}
		if len(all) >= s.p.MinNodes && lastCall == nil {
			lastCall = time.After(s.p.LastCall)
		}
		select {
		case <-s.changed:
		case <-lastCall:
			if len(all) >= s.p.MinNodes {
				return take(), nil
			}
			lastCall = nil
		case <-deadline.C:
			return nil, fmt.Errorf("only %d of the %s nodes joined the endpoint %s within --rdzv-timeout %v",
				len(all), nnodesText(s.p.MinNodes, s.p.MaxNodes), s.p.Endpoint, s.p.Timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// run forms rounds and runs the job, restarting it with a new membership
// while the job is elastic and restarts are left, and tells every node
// how it ended.
func (s *nodeServer) run(ctx context.Context, o Options) (int, error) {
	s.argv = o.Argv
	var kept []*member
	var changes []string
	first := 0    // the next round's first generation: restarts so far
	pending := "" // the change that ended the last round
	prev := 0
	for {
		members, err := s.waitRound(ctx, kept)
		if err != nil {
			s.endAll(ExitLaunch, "the job did not start: "+err.Error())
			return ExitLaunch, err
		}
		if pending != "" {
			names := make([]string, len(members))
			for i, m := range members {
				names[i] = m.name
			}
			changes = append(changes, fmt.Sprintf("restart %d: %s; %d nodes -> %d (%s)", first, pending, prev, len(members), strings.Join(names, ", ")))
		}
		prev = len(members)
		code, err, lost, next := s.runRound(ctx, o, members, first, changes)
		if lost == "" {
			msg := ""
			if code != 0 {
				msg = fmt.Sprintf("the job ended with status %d (the endpoint's node, %s, has its summary)", code, s.p.Endpoint)
			}
			s.endAll(code, msg)
			return code, err
		}
		// A node was lost: the others meet again.
		first, pending = next, lost
		fmt.Fprintf(s.stderr, "gorun: elastic: %s; the nodes meet again (restart %d of %d)\n", lost, first, o.MaxRestarts)
		kept = s.restartRound(members, o.Grace)
	}
}

// runRound runs the job on members, from generation first. lost is set
// when a node was lost and the job goes on with a new round, from
// generation next.
func (s *nodeServer) runRound(ctx context.Context, o Options, members []*member, first int, changes []string) (code int, err error, lost string, next int) {
	ip, _, _ := net.SplitHostPort(s.ln.Addr().String())
	door, err := openAgentDoor(ip, len(members), s.stderr)
	if err != nil {
		return ExitLaunch, err, "", 0
	}
	defer door.close()
	st := &joinStarter{door: door, members: map[string]*member{}, dead: make(chan struct{})}
	close(st.dead)
	hosts := make([]hostfile.Host, len(members))
	for i, m := range members {
		hosts[i] = hostfile.Host{Name: m.name, Slots: m.hello.NProc}
		st.members[m.name] = m
		start := &nodeStart{Name: m.name, Port: door.ln.Addr().(*net.TCPAddr).Port, Env: door.env(), Leave: s.p.Elastic(), Rank: i, Nodes: len(members)}
		m.l.send(nodeMsg{Start: start}) // a failure ends m's connection: listen says why
	}
	ro := o
	ro.PerNode, ro.Starter, ro.Hosts, ro.ImplicitHosts = nil, st, hosts, false
	ro.Plan.NP, ro.Plan.NPerNode = 0, 0
	ro.Plan.Source = "the per-node launch at " + s.p.Endpoint
	ro.FirstGeneration, ro.JobID, ro.RunID, ro.Membership = first, s.jobID, s.p.ID, changes
	ro.Fanout = 0
	ro.nodeOutput = true // each node prints its own ranks' output, as each node's torchrun does
	lostHost, lostCode := "", ExitLaunch
	if s.p.Elastic() {
		ro.Rejoin = func(gen int, host, why string) bool {
			if gen >= o.MaxRestarts {
				return false
			}
			lost, lostHost, next = why, host, gen+1
			return true
		}
	}
	code, err = Run(ctx, ro)
	if m := st.members[lostHost]; m != nil && m.alive() {
		// Its gorun may still be there (its link came back): it leaves.
		m.l.send(nodeMsg{End: &lostCode, Error: "this node was lost from the job (" + lost + "), which goes on without it"})
		m.l.c.Close()
	}
	if errors.Is(err, ErrRejoin) {
		return code, nil, lost, next
	}
	return code, err, "", 0
}

// restartRound tells the round's nodes that it ended and returns those
// that answer, once their agents are gone (within the grace period and
// some).
func (s *nodeServer) restartRound(members []*member, grace time.Duration) []*member {
	s.mu.Lock()
	s.round, s.running = nil, false
	s.mu.Unlock()
	var kept []*member
	limit := time.After(grace + 10*time.Second)
	for _, m := range members {
		if m.alive() {
			m.l.send(nodeMsg{Restart: true})
		}
	}
	for _, m := range members {
		select {
		case <-m.ready:
			kept = append(kept, m)
		case <-m.gone:
		case <-limit:
		}
	}
	return kept
}

// endAll tells every node, in the round or waiting, that the job ended.
func (s *nodeServer) endAll(code int, msg string) {
	s.mu.Lock()
	all := append(slices.Clone(s.round), s.lobby...)
	s.mu.Unlock()
	for _, m := range all {
		if m.alive() {
			c := code
			m.l.send(nodeMsg{End: &c, Error: msg})
		}
	}
}

// joinStarter is the starter of a round: each member was told to start
// its agent, which comes in through the door.
type joinStarter struct {
	door    *agentDoor
	members map[string]*member
	dead    chan struct{} // closed: nothing stands between an agent and its node (a member's own gone is its end)
}

// StartAgent returns host's agent once it connected back.
func (s *joinStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	m := s.members[host.Name]
	if m == nil {
		return nil, fmt.Errorf("%s: not a node of this round", host.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := s.door.wait(ctx, host.Name, nil, nil, connectTimeout, "the round's start")
	if err != nil && !m.alive() {
		return nil, fmt.Errorf("%s: the node left before its agent connected (%v)", host.Name, m.err)
	}
	if err != nil {
		return nil, err
	}
	return &tcpAgent{c: c, dead: s.dead}, nil
}
