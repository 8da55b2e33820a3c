package rendezvous

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// gorun's own rank protocol. A frame is a 4-byte big-endian payload length,
// then the payload: one op byte and up to maxFields fields, each a 4-byte
// big-endian length and its bytes. The first request must be opHello with
// the job secret and the rank.
const (
	opHello    = 'H' // secret, rank
	opPut      = 'P' // key, value
	opGet      = 'G' // key
	opFence    = 'F'
	opBye      = 'B'
	opOK       = 'o'
	opValue    = 'v' // value
	opNotFound = 'n'
	opErr      = 'e' // message

	maxFields = 3
	// DefaultMaxFrame is the largest frame a KVServer or Client accepts.
	DefaultMaxFrame = 2<<20 + 64
)

// ErrNotFound is returned by Client.Get for a key that is not (yet)
// published.
var ErrNotFound = errors.New("rendezvous: key not found")

// errFrame is wrapped by every decoding error.
var errFrame = errors.New("rendezvous: malformed frame")

func encodeFrame(op byte, fields ...string) []byte {
	n := 1
	for _, f := range fields {
		n += 4 + len(f)
	}
	b := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(b, uint32(n))
	b = append(b, op)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// readFrame reads one frame's payload of at most max bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 || uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: length %d (limit %d)", errFrame, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeFrame splits a payload into its op and fields.
func decodeFrame(p []byte) (byte, []string, error) {
	if len(p) == 0 {
		return 0, nil, fmt.Errorf("%w: empty", errFrame)
	}
	op, p := p[0], p[1:]
	var fields []string
	for len(p) > 0 {
		if len(fields) == maxFields {
			return 0, nil, fmt.Errorf("%w: more than %d fields", errFrame, maxFields)
		}
		if len(p) < 4 {
			return 0, nil, fmt.Errorf("%w: truncated field length", errFrame)
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(n) > uint64(len(p)) {
			return 0, nil, fmt.Errorf("%w: field of %d bytes, %d left", errFrame, n, len(p))
		}
		fields = append(fields, string(p[:n]))
		p = p[n:]
	}
	want := map[byte]int{opHello: 2, opPut: 2, opGet: 1, opFence: 0, opBye: 0, opOK: 0, opValue: 1, opNotFound: 0, opErr: 1}
	n, ok := want[op]
	if !ok {
		return 0, nil, fmt.Errorf("%w: unknown op %q", errFrame, op)
	}
	if len(fields) != n {
		return 0, nil, fmt.Errorf("%w: op %q with %d fields, want %d", errFrame, op, len(fields), n)
	}
	return op, fields, nil
}

// SocketDir creates a new directory under parent (os.TempDir() if empty)
// that only the current user can open (mode 0700), for the job's sockets.
func SocketDir(parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, "gorun-kv-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// KVConfig configures a KVServer for one host's Go ranks.
type KVConfig struct {
	// Secret is the per-job secret every client must present first.
	Secret []byte
	// Ranks are the job ranks this server serves; a fence waits for all.
	Ranks []int
	// Fencer runs the job-wide fence once all local ranks fenced.
	Fencer Fencer
	// MaxKeyLen and MaxValueLen bound keys and values (defaults
	// DefaultMaxKeyLen and DefaultMaxValueLen).
	MaxKeyLen, MaxValueLen int
	// OnEarlyExit is called when a rank's connection ends without a Close.
	OnEarlyExit func(rank int)
	// FenceTimeout bounds a fence from the first local rank's arrival
	// (0 = no bound); OnFenceTimeout is told the local ranks that never
	// arrived.
	FenceTimeout   time.Duration
	OnFenceTimeout func(missing []int)
	// RankBudget bounds what one rank may put in a generation, JobBudget
	// what the job may hold (zero fields: DefaultRankBudget and
	// DefaultJobBudget). A put over either fails with a *BudgetError,
	// which the client's Put returns; the connection stays up.
	RankBudget, JobBudget Budget
	// Logf, if set, is told of each rank's first refused put.
	Logf func(format string, args ...any)
}

// KVServer serves gorun's key-value protocol to one host's Go ranks (see
// Client) and aggregates their fences into one Fencer call.
type KVServer struct {
	cfg   KVConfig
	local *localKV

	mu        sync.Mutex
	connected map[int]bool
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
}

// NewKVServer checks cfg and returns a server.
func NewKVServer(cfg KVConfig) (*KVServer, error) {
	if len(cfg.Secret) < 16 {
		return nil, errors.New("rendezvous: KV secret shorter than 16 bytes")
	}
	if cfg.MaxKeyLen <= 0 {
		cfg.MaxKeyLen = DefaultMaxKeyLen
	}
	if cfg.MaxValueLen <= 0 {
		cfg.MaxValueLen = DefaultMaxValueLen
	}
	local, err := newLocalKV(cfg.Fencer, cfg.Ranks, nil)
	if err != nil {
		return nil, err
	}
	local.watch = fenceWatch{Timeout: cfg.FenceTimeout, OnTimeout: cfg.OnFenceTimeout}
	local.setBudgets(cfg.RankBudget, cfg.JobBudget)
	local.logf = cfg.Logf
	return &KVServer{cfg: cfg, local: local, connected: map[int]bool{}, conns: map[net.Conn]bool{}}, nil
}

// Listen creates the unix socket dir/name (dir should come from SocketDir)
// and serves it in the background until ctx ends; it returns the listener.
func (s *KVServer) Listen(ctx context.Context, dir, name string) (net.Listener, error) {
	l, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	go s.Serve(ctx, l)
	return l, nil
}

// Serve accepts connections on l until ctx ends or l fails, and closes l.
func (s *KVServer) Serve(ctx context.Context, l net.Listener) error {
	return acceptLoop(ctx, l, &s.wg, func(c net.Conn) { s.ServeConn(ctx, c) })
}

// Close closes every connection and fails every fence in progress.
func (s *KVServer) Close() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.local.gone(errors.New("rendezvous: KV server closed"))
	s.wg.Wait()
}

func (s *KVServer) maxFrame() int { return 1 + 3*4 + s.cfg.MaxKeyLen + s.cfg.MaxValueLen + 64 }

// ServeConn serves one client connection until it says goodbye, fails or
// ctx ends, and closes c.
func (s *KVServer) ServeConn(ctx context.Context, c net.Conn) error {
	s.mu.Lock()
	s.conns[c] = true
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	rank, bye := -1, false
	defer func() {
		stop()
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		if rank >= 0 && !bye {
			s.local.gone(fmt.Errorf("rendezvous: rank %d left without closing its KV client", rank))
			if s.cfg.OnEarlyExit != nil && ctx.Err() == nil {
				s.cfg.OnEarlyExit(rank)
			}
		}
	}()
	send := func(op byte, f ...string) error { _, err := c.Write(encodeFrame(op, f...)); return err }

	// Hello first, within a short time, with the right secret.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := readFrame(c, 4096)
	if err != nil {
		return err
	}
	op, f, err := decodeFrame(p)
	if err != nil || op != opHello {
		send(opErr, "hello expected")
		return fmt.Errorf("rendezvous: KV client did not say hello: %v", err)
	}
	if subtle.ConstantTimeCompare([]byte(f[0]), s.cfg.Secret) != 1 {
		send(opErr, "authentication failed")
		return errors.New("rendezvous: KV client presented a wrong secret")
	}
	r, err := strconv.Atoi(f[1])
	if err != nil || !s.local.ranks[r] {
		send(opErr, "unknown rank")
		return fmt.Errorf("rendezvous: KV client claims unknown rank %q", f[1])
	}
	s.mu.Lock()
	dup := s.connected[r]
	s.connected[r] = true
	s.mu.Unlock()
	if dup {
		send(opErr, "rank already connected")
		return fmt.Errorf("rendezvous: rank %d connected twice", r)
	}
	rank = r
	c.SetReadDeadline(time.Time{})
	if err := send(opOK); err != nil {
		return err
	}
	for {
		p, err := readFrame(c, s.maxFrame())
		if err != nil {
			if errors.Is(err, errFrame) {
				send(opErr, err.Error())
			}
			return err
		}
		op, f, err := decodeFrame(p)
		if err != nil {
			send(opErr, err.Error())
			return err
		}
		switch op {
		case opPut:
			if f[0] == "" || len(f[0]) > s.cfg.MaxKeyLen || len(f[1]) > s.cfg.MaxValueLen {
				err = send(opErr, "key or value too large, or empty key")
				break
			}
			if perr := s.local.put(rank, f[0], f[1]); perr != nil {
				err = send(opErr, perr.Error())
				break
			}
			err = send(opOK)
		case opGet:
			if v, ok := s.local.get(f[0]); ok {
				err = send(opValue, v)
			} else {
				err = send(opNotFound)
			}
		case opFence:
			if ferr := s.local.barrier(ctx, rank); ferr != nil {
				send(opErr, ferr.Error())
				bye = true // dropped by us, not an early exit
				return ferr
			}
			err = send(opOK)
		case opBye:
			bye = true
			send(opOK)
			return nil
		default:
			send(opErr, "unexpected op")
			return fmt.Errorf("rendezvous: rank %d sent op %q", rank, op)
		}
		if err != nil {
			return err
		}
	}
}

// Client is a Go rank's connection to its host's KVServer. Its methods are
// safe for concurrent use but run one at a time.
type Client struct {
	mu       sync.Mutex
	c        net.Conn
	maxFrame int
}

// Dial connects to the KVServer socket at path as rank, presenting secret.
func Dial(ctx context.Context, path string, secret []byte, rank int) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	cl := &Client{c: c, maxFrame: DefaultMaxFrame}
	if err := cl.call(ctx, opOK, encodeFrame(opHello, string(secret), strconv.Itoa(rank)), nil); err != nil {
		c.Close()
		return nil, err
	}
	return cl, nil
}

// call sends req and reads a reply; want is the op of success, whose first
// field (if any) goes to *out.
func (cl *Client) call(ctx context.Context, want byte, req []byte, out *string) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { cl.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := cl.c.Write(req); err != nil {
		return err
	}
	p, err := readFrame(cl.c, cl.maxFrame)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	op, f, err := decodeFrame(p)
	switch {
	case err != nil:
		return err
	case op == want:
		if out != nil && len(f) > 0 {
			*out = f[0]
		}
		return nil
	case op == opNotFound:
		return ErrNotFound
	case op == opErr:
		return fmt.Errorf("rendezvous: server: %s", f[0])
	}
	return fmt.Errorf("%w: unexpected reply op %q", errFrame, op)
}

// Put stores key=value; other ranks see it after the next Fence.
func (cl *Client) Put(key, value string) error {
	return cl.call(context.Background(), opOK, encodeFrame(opPut, key, value), nil)
}

// Get returns the value of key from the host's cache, or ErrNotFound. It
// never waits for the key to appear.
func (cl *Client) Get(key string) (string, error) {
	var v string
	err := cl.call(context.Background(), opValue, encodeFrame(opGet, key), &v)
	return v, err
}

// Fence returns once every rank of the job fenced, with all their puts
// visible to Get. After a failed Fence (ctx ended, a rank left, timeout) the
// client is unusable.
func (cl *Client) Fence(ctx context.Context) error {
	return cl.call(ctx, opOK, encodeFrame(opFence), nil)
}

// Close says goodbye (so the server does not report an early exit) and
// closes the connection.
func (cl *Client) Close() error {
	cl.call(context.Background(), opOK, encodeFrame(opBye), nil)
	return cl.c.Close()
}

// acceptLoop accepts connections on l and serves each with serve in its own
// goroutine (counted in wg) until ctx ends or l fails; it closes l.
func acceptLoop(ctx context.Context, l net.Listener, wg *sync.WaitGroup, serve func(net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer l.Close()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(c)
		}()
	}
}

// Environment variables a rank under gorun finds its rendezvous by.
const (
	EnvSocket = "GORUN_AGENT_SOCKET" // the agent's socket for this rank
	EnvSecret = "GORUN_JOB_SECRET"   // the job's secret
	EnvRank   = "GORUN_RANK"         // the rank
)

// ErrNotUnderGorun is returned by DialEnv outside a gorun job.
var ErrNotUnderGorun = errors.New("rendezvous: not started by gorun (no " + EnvSocket + ")")

// DialEnv connects a rank started by gorun to its agent, from the
// environment gorun gave it.
func DialEnv(ctx context.Context) (*Client, error) {
	path := os.Getenv(EnvSocket)
	if path == "" {
		return nil, ErrNotUnderGorun
	}
	rank, err := strconv.Atoi(os.Getenv(EnvRank))
	if err != nil {
		return nil, fmt.Errorf("rendezvous: %s=%q: %w", EnvRank, os.Getenv(EnvRank), err)
	}
	c, err := Dial(ctx, path, []byte(os.Getenv(EnvSecret)), rank)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d: %w", rank, err)
	}
	return c, nil
}
