package jobs

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/gorun/gorun/internal/atomicfile"
	"github.com/gorun/gorun/internal/selfcert"
	"io"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvDir names the job directory; "off" publishes no job.
const EnvDir = "GORUN_JOBS_DIR"

// Off is the job directory that turns publishing off.
const Off = "off"

// maxRequest bounds a request line; maxAnswer an answer line.
const (
	maxRequest = 4 << 10
	maxAnswer  = 64 << 20
)

// handshakeTimeout bounds a client's TLS handshake and request.
const handshakeTimeout = 5 * time.Second

// The job socket's bounds. A connection is pending until it has presented
// the job's key (its TLS handshake and request line); it is then a
// request, which a head serves maxConns at a time.
const (
	// maxConns bounds the requests a head serves at once.
	maxConns = 16
	// maxPending bounds the pending connections. A new one past it
	// takes the place of one that has sent nothing (a silent one, which
	// a client never is), else of one pending for pendingGrace, else
	// it is closed.
	maxPending = 64
	// maxPendingFrom bounds the pending connections from one address of
	// another host (or of this one, where the kernel cannot say whose
	// they are): past it, a new one takes the place of one of that
	// address's, as above, or is closed.
	maxPendingFrom = 16
	// pendingGrace is how long a pending connection that has sent
	// something keeps its place when the pending are full: a client
	// presents its key within milliseconds of connecting.
	pendingGrace = time.Second
	// requestTimeout bounds the handler of one request.
	requestTimeout = time.Minute
)

// callRetry bounds how long Call tries again a job socket that closes on
// it before answering (its pending connections are full, someone is
// flooding it) or says that it serves maxConns requests already.
const callRetry = 10 * time.Second

// Info is what a job file says about a running job.
type Info struct {
	ID      string    `json:"id"`
	PID     int       `json:"pid"`  // the head's
	Host    string    `json:"host"` // the head's host name
	UID     int       `json:"uid"`
	Argv    []string  `json:"argv"`
	Ranks   int       `json:"ranks"`
	Hosts   []string  `json:"hosts"`
	Started time.Time `json:"started"`
	// State is what the head is doing: starting, running, stopping.
	State string `json:"state"`
	// Addrs are the job socket's addresses, loopback first.
	Addrs []string `json:"addrs"`
	// Cert is the hex SHA-256 of the socket's certificate (DER); Key is
	// the hex key a client presents.
	Cert string `json:"cert"`
	Key  string `json:"key"`

	file string // where it was read from
}

// Request is what a client asks a head.
type Request struct {
	Key     string `json:"key"`
	Op      string `json:"op"`
	Verbose bool   `json:"verbose,omitempty"`
}

// answer is a head's reply.
type answer struct {
	Data  json.RawMessage `json:"data,omitempty"`
	Error string          `json:"error,omitempty"`
	// Busy says that the head serves maxConns requests already: the
	// client may ask again.
	Busy bool `json:"busy,omitempty"`
}

// errBusy is a head's answer when it serves maxConns requests already;
// Call asks again.
var errBusy = fmt.Errorf("the job's head serves %d requests already", maxConns)

// Handler answers a request; what it returns is marshalled as JSON.
type Handler func(ctx context.Context, r Request) (any, error)

// Dir returns the job directory: $GORUN_JOBS_DIR, else ~/.gorun/jobs.
// It returns Off when publishing is off.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("job directory: %w (set %s)", err, EnvDir)
	}
	return filepath.Join(home, ".gorun", "jobs"), nil
}

// privateDir creates dir (0700) if needed and checks that it is the
// user's alone.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("job directory %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("job directory %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("job directory %s belongs to uid %d, not to you", dir, st.Uid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("job directory %s is open to others (%v): %w", dir, fi.Mode().Perm(), err)
		}
	}
	return nil
}

// Server is a published job's socket.
//
// It answers only a client that presents the job's key, maxConns at a
// time, and bounds the connections that have not presented it yet (see
// maxPending): a client of this host that runs as another user (who can
// never read the key) is closed at once, where the kernel says whose a
// connection is (sock_diag, on Linux); one that has sent nothing yet
// gives its place to a new one; one from another host counts against its
// address's share. So neither another user nor another host can keep
// the owner's gorun status or stacks out by holding connections.
type Server struct {
	info    Info
	key     []byte
	file    string
	tls     *tls.Config
	handler Handler
	lns     []net.Listener
	slots   chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	mu      sync.Mutex // guards info and closed
	closed  bool

	peers   bool           // the kernel says whose a connection of this host is (peerUID)
	pmu     sync.Mutex     // guards pending
	pending []*pendingConn // oldest first
	refused atomic.Int64   // connections of other users of this host, closed at once
}

// pendingConn is a connection that has not presented the job's key yet.
type pendingConn struct {
	raw   net.Conn
	from  string // its address where it counts against maxPendingFrom, else ""
	since time.Time
	heard atomic.Bool // it has sent something
}

// Read reads from the connection, noting that its client sent something.
func (p *pendingConn) Read(b []byte) (int, error) {
	n, err := p.raw.Read(b)
	if n > 0 {
		p.heard.Store(true)
	}
	return n, err
}

// silent reports whether p's client has sent nothing yet, not even what
// the kernel holds unread.
func (p *pendingConn) silent() bool {
	return !p.heard.Load() && queued(p.raw) == 0
}

// Publish serves h on a new job socket listening on each of ips (port
// chosen by the kernel; "" listens on every interface and lists each of
// their addresses) and writes info's job file into dir. Info's
// addresses, certificate, key, uid and pid are filled in here.
func Publish(dir string, info Info, ips []string, h Handler) (*Server, error) {
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	cert, fp, err := identity(dir)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{key: key, handler: h, slots: make(chan struct{}, maxConns), ctx: ctx, cancel: cancel,
		tls: selfcert.ServerConfig(cert)}
	info.Addrs = nil
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("job socket on %s: %w", ip, err)
		}
		s.lns = append(s.lns, ln)
		if ip != "" {
			info.Addrs = append(info.Addrs, ln.Addr().String())
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		info.Addrs = append(info.Addrs, net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
				info.Addrs = append(info.Addrs, net.JoinHostPort(n.IP.String(), fmt.Sprint(port)))
			}
		}
	}
	info.Cert, info.Key = fp, hex.EncodeToString(key)
	info.PID, info.UID = os.Getpid(), os.Getuid()
	s.info = info
	s.file = filepath.Join(dir, info.ID+".json")
	if err := writeFile(s.file, info); err != nil {
		s.Close()
		return nil, err
	}
	s.peers = knowsPeers(info.Addrs[0])
	for _, ln := range s.lns {
		s.wg.Add(1)
		go s.serve(ln)
	}
	return s, nil
}

// knowsPeers reports whether the kernel says whose a connection to addr
// (a job socket's, not yet served) is: it does where sock_diag answers
// for one of this process's. Where it cannot, asking for every
// connection would only cost each a netlink round trip (and perhaps a
// modprobe).
func knowsPeers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	uid, ok := peerUID(c)
	return ok && uid == os.Getuid()
}

// Info returns the published job file's contents.
func (s *Server) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// SetState rewrites the job file with the head's new state.
func (s *Server) SetState(state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.info.State == state {
		return nil
	}
	s.info.State = state
	return writeFile(s.file, s.info)
}

// Close stops serving, waits for the requests in progress, and removes
// the job file.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if s.file != "" {
			if rerr := os.Remove(s.file); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = rerr
			}
		}
		s.cancel()
		for _, ln := range s.lns {
			ln.Close()
		}
		s.wg.Wait()
	})
	return err
}

func (s *Server) serve(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: wait it out
			continue
		}
		p := s.admit(c)
		if p == nil {
			c.Close() // the client, if it is one, asks again
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(p)
		}()
	}
}

// admit makes c a pending connection, in the place of another where the
// pending are full (see maxPending), or returns nil where c is refused:
// its client is another user of this host, or every place is held by a
// client that may be under way.
func (s *Server) admit(c net.Conn) *pendingConn {
	p := &pendingConn{raw: c, since: time.Now()}
	uid, known := 0, false
	if s.peers {
		uid, known = peerUID(c)
	}
	if known && uid != os.Getuid() && uid != 0 {
		s.refused.Add(1)
		return nil
	}
	if !known {
		if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
			p.from = host
		}
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	var victim *pendingConn
	if p.from != "" {
		n := 0
		for _, q := range s.pending {
			if q.from == p.from {
				n++
			}
		}
		if n >= maxPendingFrom {
			if victim = s.evictable(p.from, p.since); victim == nil {
				return nil
			}
		}
	}
	if victim == nil && len(s.pending) >= maxPending {
		if victim = s.evictable("", p.since); victim == nil {
			return nil
		}
	}
	if victim != nil {
		s.dropLocked(victim)
		victim.raw.Close()
	}
	s.pending = append(s.pending, p)
	return p
}

// evictable returns the pending connection (from address from, or any
// where from is "") that a new one may take the place of at now: the
// oldest silent one, else the oldest pending for pendingGrace; nil where
// none may go. Called with pmu held.
func (s *Server) evictable(from string, now time.Time) *pendingConn {
	var stale *pendingConn
	for _, q := range s.pending {
		if from != "" && q.from != from {
			continue
		}
		if q.silent() {
			return q
		}
		if stale == nil && now.Sub(q.since) >= pendingGrace {
			stale = q
		}
	}
	return stale
}

// dropLocked removes p from the pending connections and reports whether
// it was there (not yet evicted). Called with pmu held.
func (s *Server) dropLocked(p *pendingConn) bool {
	for i, q := range s.pending {
		if q == p {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return true
		}
	}
	return false
}

// drop removes p from the pending connections (see dropLocked).
func (s *Server) drop(p *pendingConn) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.dropLocked(p)
}

// serveConn answers one request: p's, once it has presented the key and
// a place among the maxConns requests is free (within handshakeTimeout).
func (s *Server) serveConn(p *pendingConn) {
	raw := p.raw
	defer raw.Close()
	defer s.drop(p) // a no-op once it presented the key
	stop := context.AfterFunc(s.ctx, func() { raw.Close() })
	defer stop()
	raw.SetDeadline(time.Now().Add(handshakeTimeout))
	c := tls.Server(readConn{raw, p}, s.tls)
	line, err := bufio.NewReaderSize(io.LimitReader(c, maxRequest), 512).ReadSlice('\n')
	if err != nil {
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		writeAnswer(c, nil, fmt.Errorf("bad request: %v", err))
		return
	}
	got, err := hex.DecodeString(req.Key)
	if err != nil || subtle.ConstantTimeCompare(got, s.key) != 1 {
		writeAnswer(c, nil, errors.New("wrong key"))
		return
	}
	if !s.drop(p) {
		return // evicted meanwhile: closed
	}
	wait := time.NewTimer(handshakeTimeout)
	select {
	case s.slots <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		raw.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		writeAnswer(c, nil, errBusy)
		return
	case <-s.ctx.Done():
		return
	}
	defer func() { <-s.slots }()
	raw.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	v, err := s.handler(ctx, req)
	cancel()
	raw.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	writeAnswer(c, v, err)
}

// readConn is a pending connection whose reads go through its
// pendingConn, which notes that the client sent something.
type readConn struct {
	net.Conn
	p *pendingConn
}

func (r readConn) Read(b []byte) (int, error) { return r.p.Read(b) }

func writeAnswer(w io.Writer, v any, err error) {
	var a answer
	if err == nil {
		a.Data, err = json.Marshal(v)
	}
	if err != nil {
		a.Error = err.Error()
		a.Busy = errors.Is(err, errBusy)
	}
	b, _ := json.Marshal(a)
	w.Write(append(b, '\n'))
}

// identityFile holds the certificate and key of the user's job sockets,
// in the job directory: made once (a fresh process spends about a
// millisecond making one) and read by every job after.
const identityFile = ".identity.pem"

// identity returns the job sockets' certificate, and its fingerprint,
// from dir's identity file, made anew when it is missing, unreadable or
// about to expire. Only the user can read it (the directory is 0700, the
// file 0600), as the job files that pin its fingerprint.
func identity(dir string) (tls.Certificate, string, error) {
	file := filepath.Join(dir, identityFile)
	if b, err := os.ReadFile(file); err == nil {
		if c, err := tls.X509KeyPair(b, b); err == nil && c.Leaf != nil && time.Until(c.Leaf.NotAfter) > 7*24*time.Hour {
			return c, selfcert.Fingerprint(c.Certificate[0]), nil
		}
	}
	c, fp, err := selfcert.New("gorun job")
	if err != nil {
		return c, "", err
	}
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return c, "", err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
	b = append(b, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})...)
	if err := writeBytes(file, b); err != nil {
		return c, "", err
	}
	return c, fp, nil
}

// writeFile writes info as file, atomically and readable by the user
// alone.
func writeFile(file string, info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return writeBytes(file, append(b, '\n'))
}

// writeBytes writes b as file, atomically and readable by the user alone.
func writeBytes(file string, b []byte) error {
	if err := atomicfile.Write(file, b, atomicfile.Options{}); err != nil {
		return fmt.Errorf("job file %s: %w", file, err)
	}
	return nil
}

// List returns the jobs whose files are in dir, oldest first; Stale
// reports those whose head is gone. A file that cannot be read is
// skipped, and named in the error (the others are still returned).
func List(dir string) ([]Info, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Info
	var errs []error
	for _, n := range names {
		info, err := readFile(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, errors.Join(errs...)
}

func readFile(file string) (Info, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Info{}, fmt.Errorf("job file %s: %w", file, err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, fmt.Errorf("job file %s: %w", file, err)
	}
	if info.ID == "" || len(info.Addrs) == 0 {
		return Info{}, fmt.Errorf("job file %s: no job id or address", file)
	}
	info.file = file
	return info, nil
}

// Stale reports whether info's head is known to be gone: on the head's
// own host, no process has its pid; elsewhere, its socket refuses.
func Stale(info Info) bool {
	if h, _ := os.Hostname(); h == info.Host {
		return syscall.Kill(info.PID, 0) == syscall.ESRCH
	}
	for _, a := range info.Addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			return false
		}
	}
	return true
}

// Remove deletes a stale job's file.
func Remove(info Info) error {
	if info.file == "" {
		return nil
	}
	return os.Remove(info.file)
}

// ErrNoJob is wrapped when no running job matches.
var ErrNoJob = errors.New("no such job")

// Find returns the running job in dir whose id starts with id; with id
// "", the only running job.
func Find(dir, id string) (Info, error) {
	all, err := List(dir)
	var match []Info
	for _, in := range all {
		if strings.HasPrefix(in.ID, id) && !Stale(in) {
			match = append(match, in)
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) > 1 && id == "":
		return Info{}, fmt.Errorf("%d jobs are running: name one (gorun ps lists them)", len(match))
	case len(match) > 1:
		return Info{}, fmt.Errorf("job id %q is ambiguous: %d jobs match", id, len(match))
	case id == "":
		return Info{}, errors.Join(fmt.Errorf("%w: no job of yours is running (job files in %s)", ErrNoJob, dir), err)
	}
	return Info{}, errors.Join(fmt.Errorf("%w: no running job %q (job files in %s)", ErrNoJob, id, dir), err)
}

// Call sends req (its Key is info's) to info's head and decodes the
// answer's data into out.
//
// A head whose socket closes the connection before answering (its
// pending connections are full: someone may be flooding it) or that
// serves maxConns requests already is asked again, after 25 ms, then
// twice as long each time up to a second, for up to callRetry (10 s) or
// until ctx ends; the error then says so. A head that refuses the
// connection is gone, and is not asked again.
func Call(ctx context.Context, info Info, req Request, out any) error {
	req.Key = info.Key
	if want, err := hex.DecodeString(info.Cert); err != nil || len(want) != sha256.Size {
		return fmt.Errorf("job %s: bad certificate fingerprint in its file", info.ID)
	}
	cfg := selfcert.PinnedConfig(info.Cert, func(got string) error {
		if got == "" {
			return errors.New("no certificate")
		}
		return errors.New("the job socket's certificate is not the job's")
	})
	start := time.Now()
	pause := 25 * time.Millisecond
	for tries := 1; ; tries++ {
		addr, err := callOnce(ctx, info, cfg, req, out)
		switch {
		case err == nil:
			return nil
		case addr == "":
			return fmt.Errorf("job %s: cannot reach its head (%s): %w", info.ID, strings.Join(info.Addrs, ", "), err)
		case !errors.Is(err, errBusy) && !closedEarly(err):
			return fmt.Errorf("job %s at %s: %w", info.ID, addr, err)
		}
		flooded := func() error {
			return fmt.Errorf("job %s at %s: no answer in %d tries over %v: the job's socket is full, or someone is flooding it (last: %w)",
				info.ID, addr, tries, time.Since(start).Round(time.Millisecond), err)
		}
		pause += mathrand.N(pause / 2) // clients that collided collide no more
		if time.Since(start)+pause > callRetry {
			return flooded()
		}
		select {
		case <-ctx.Done():
			return flooded()
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// callOnce sends req to the first of info's addresses that takes a
// connection, and returns that address ("" with the last error where
// none did).
func callOnce(ctx context.Context, info Info, cfg *tls.Config, req Request, out any) (string, error) {
	var lastErr error
	for _, addr := range info.Addrs {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		raw, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		err = call(ctx, raw, cfg, req, out)
		raw.Close()
		return addr, err
	}
	return "", lastErr
}

// closedEarly reports whether err is a connection's end before the
// answer: what a client sees of a job socket that closed it while it was
// pending.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func call(ctx context.Context, raw net.Conn, cfg *tls.Config, req Request, out any) error {
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c := tls.Client(raw, cfg)
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return err
	}
	line, err := bufio.NewReaderSize(io.LimitReader(c, maxAnswer), 64<<10).ReadBytes('\n')
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case len(line) >= maxAnswer:
			return fmt.Errorf("answer longer than %d MiB", maxAnswer>>20)
		case len(line) > 0: // not a pending connection's end: not asked again
			return fmt.Errorf("answer cut after %d bytes: %v", len(line), err)
		}
		return err
	}
	var a answer
	if err := json.Unmarshal(line, &a); err != nil {
		return fmt.Errorf("bad answer: %w", err)
	}
	if a.Busy {
		return errBusy
	}
	if a.Error != "" {
		return errors.New(a.Error)
	}
	if out != nil {
		return json.Unmarshal(a.Data, out)
	}
	return nil
}
