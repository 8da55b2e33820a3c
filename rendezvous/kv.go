package rendezvous

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// gorun's own rank protocol. A frame is a 4-byte big-endian payload length,
// then the payload: one op byte and up to maxFields fields, each a 4-byte
// big-endian length and its bytes. The first request must be opHello with
// the job secret and the rank; a client that also names featAnswers there
// answers the server's requests (opDump, opProgress) with opAnswer at any
// time, even while its own call waits for its reply, and may send its
// final Progress with its goodbye. The client makes one call at a time;
// the server replies to each in order.
const (
	opHello    = 'H' // secret, rank[, features]
	opPut      = 'P' // key, value
	opGet      = 'G' // key
	opFence    = 'F'
	opBye      = 'B' // [final Progress, JSON]
	opOK       = 'o'
	opValue    = 'v' // value
	opNotFound = 'n'
	opErr      = 'e' // message
	opDump     = 'D' // id: the server asks for the client's goroutines
	opProgress = 'R' // id: the server asks for the client's Progress
	opAnswer   = 'a' // id, body: the client's answer to a request

	maxFields = 3
	// DefaultMaxFrame is the largest frame a KVServer or Client accepts.
	DefaultMaxFrame = 2<<20 + 64

	// featAnswers, in the hello's features, says that the client answers
	// the server's requests.
	featAnswers = "answers"
)

// msgHelloExpected is the server's reply to a first frame that is no
// hello it takes; an older server's to a hello with features.
const msgHelloExpected = "hello expected"

// opFields is the number of fields each op takes, at least and at most.
var opFields = map[byte][2]int{
	opHello: {2, 3}, opPut: {2, 2}, opGet: {1, 1}, opFence: {0, 0}, opBye: {0, 1},
	opOK: {0, 0}, opValue: {1, 1}, opNotFound: {0, 0}, opErr: {1, 1},
	opDump: {1, 1}, opProgress: {1, 1}, opAnswer: {2, 2},
}

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
	n, ok := opFields[op]
	if !ok {
		return 0, nil, fmt.Errorf("%w: unknown op %q", errFrame, op)
	}
	if len(fields) < n[0] || len(fields) > n[1] {
		return 0, nil, fmt.Errorf("%w: op %q with %d fields, want %d to %d", errFrame, op, len(fields), n[0], n[1])
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

// ErrNoClient is wrapped by the errors of [KVServer.Dump] and
// [KVServer.Progress] about a rank that has no client that can answer:
// none connected (yet, or any more), or one of an older gorun that does
// not answer requests. The agent then learns what it wants another way.
var ErrNoClient = errors.New("rendezvous: no client connected that answers requests")

// KVServer serves gorun's key-value protocol to one host's Go ranks (see
// Client) and aggregates their fences into one Fencer call. It can also
// ask a rank's client, over the rank's own connection, for the stacks of
// its goroutines ([KVServer.Dump]) and for its [Progress], and it counts
// the rank's requests ([KVServer.Ops]).
type KVServer struct {
	cfg   KVConfig
	local *localKV
	ops   map[int]*atomic.Uint64 // by rank; fixed at NewKVServer

	mu        sync.Mutex
	connected map[int]bool
	conns     map[net.Conn]bool
	clients   map[int]*kvConn  // the connected ranks' connections
	final     map[int]Progress // what ranks sent with their goodbye
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
	local, ops, err := newServerKV(serverKV{
		fencer:     cfg.Fencer,
		ranks:      cfg.Ranks,
		watch:      fenceWatch{Timeout: cfg.FenceTimeout, OnTimeout: cfg.OnFenceTimeout},
		rankBudget: cfg.RankBudget,
		jobBudget:  cfg.JobBudget,
		logf:       cfg.Logf,
	})
	if err != nil {
		return nil, err
	}
	return &KVServer{cfg: cfg, local: local, ops: ops, connected: map[int]bool{}, conns: map[net.Conn]bool{},
		clients: map[int]*kvConn{}, final: map[int]Progress{}}, nil
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

// Ops returns how many requests (puts, gets and fences) rank made so far,
// or 0 for a rank this server does not serve. A rank whose count stops
// growing makes no rendezvous calls.
func (s *KVServer) Ops(rank int) uint64 {
	if n, ok := s.ops[rank]; ok {
		return n.Load()
	}
	return 0
}

// Final returns the Progress that rank sent with its goodbye (the client's
// Close), for the job's summary: a rank that exited cannot be asked. It
// reports false until then, and for a client that keeps no Progress
// ([Client.SetProgress]) or is an older gorun's.
func (s *KVServer) Final(rank int) (Progress, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.final[rank]
	return p, ok
}

// Dump returns the stacks of every goroutine of rank's process, as
// runtime.Stack writes them (cut to MaxDump bytes with a line that says
// so), asked over the rank's own connection: no signal is sent, and the
// rank answers even while blocked in a Fence or in a collective. It fails
// with an error wrapping ErrNoClient when rank has no client that can
// answer, and with ctx's error when the rank does not answer in time.
func (s *KVServer) Dump(ctx context.Context, rank int) ([]byte, error) {
	body, err := s.ask(ctx, rank, opDump)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: goroutine dump of %w", err)
	}
	return []byte(body), nil
}

// Progress asks rank's client for its Progress, as Dump asks for its
// goroutines, with the same errors. A client that keeps no Progress
// answers with the zero Progress.
func (s *KVServer) Progress(ctx context.Context, rank int) (Progress, error) {
	body, err := s.ask(ctx, rank, opProgress)
	if err != nil {
		return Progress{}, fmt.Errorf("rendezvous: progress of %w", err)
	}
	var p Progress
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return Progress{}, fmt.Errorf("rendezvous: progress of rank %d: %w", rank, err)
	}
	return p, nil
}

// ask sends request op to rank's client and returns its answer. Its
// errors start with the rank ("rank 3 ...").
func (s *KVServer) ask(ctx context.Context, rank int, op byte) (string, error) {
	s.mu.Lock()
	k := s.clients[rank]
	s.mu.Unlock()
	if k == nil {
		return "", fmt.Errorf("rank %d: %w", rank, ErrNoClient)
	}
	if !k.answers {
		return "", fmt.Errorf("rank %d: its client (of an older gorun) does not answer: %w", rank, ErrNoClient)
	}
	ch := make(chan string, 1)
	k.mu.Lock()
	k.next++
	id := k.next
	k.waiting[id] = ch
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.waiting, id)
		k.mu.Unlock()
	}()
	gone := fmt.Errorf("rank %d: its client disconnected: %w", rank, ErrNoClient)
	if err := k.send(ctx, encodeFrame(op, strconv.FormatUint(id, 10))); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("rank %d did not answer: %w", rank, ctx.Err())
		}
		return "", gone
	}
	select {
	case body := <-ch:
		return body, nil
	case <-ctx.Done():
		return "", fmt.Errorf("rank %d did not answer: %w", rank, ctx.Err())
	case <-k.end:
		return "", gone
	}
}

func (s *KVServer) maxFrame() int { return 1 + 3*4 + s.cfg.MaxKeyLen + s.cfg.MaxValueLen + 64 }

// kvConn is a rank's connection to a KVServer once it said hello. Its
// writer goroutine writes the frames that the read loop (replies), the
// fence (its reply) and Dump and Progress (requests) queue, in order.
type kvConn struct {
	c       net.Conn
	pid     int           // the client's process, from the socket's credentials; 0 if unknown
	answers bool          // the client answers requests
	out     chan []byte   // frames for the writer
	end     chan struct{} // closed when the connection ends
	wdone   chan struct{} // closed when the writer returned
	fencing atomic.Bool   // a fence of the rank's is in progress

	mu       sync.Mutex
	next     uint64                 // the last request id
	waiting  map[uint64]chan string // requests waiting for their answer
	fenceErr error                  // the failed fence that ends the connection
}

// send queues frame b for the writer; it fails when the connection ends
// or ctx does first.
func (k *kvConn) send(ctx context.Context, b []byte) error {
	select {
	case k.out <- b:
		return nil
	case <-k.end:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writer writes the queued frames until the connection ends, and then
// those still queued; it closes the connection when a write fails.
func (k *kvConn) writer() {
	defer close(k.wdone)
	write := func(b []byte) bool {
		if _, err := k.c.Write(b); err != nil {
			k.c.Close()
			return false
		}
		return true
	}
	for {
		select {
		case b := <-k.out:
			if !write(b) {
				return
			}
		case <-k.end:
			for {
				select {
				case b := <-k.out:
					if !write(b) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// deliver hands an answer to the request waiting for it; answers to
// requests that stopped waiting are dropped.
func (k *kvConn) deliver(id, body string) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return
	}
	k.mu.Lock()
	ch := k.waiting[n]
	delete(k.waiting, n)
	k.mu.Unlock()
	if ch != nil {
		ch <- body
	}
}

// flushTimeout bounds how long a connection that ends waits for its last
// frames to be written.
const flushTimeout = 5 * time.Second

// ServeConn serves one client connection until it says goodbye, fails or
// ctx ends, and closes c. It reads on while a fence of the rank's is in
// progress, so that the client's answers to Dump and Progress arrive.
func (s *KVServer) ServeConn(ctx context.Context, c net.Conn) error {
	s.mu.Lock()
	s.conns[c] = true
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	ss := &kvSession{s: s, ctx: ctx, c: c, rank: -1}
	defer func() {
		stop()
		ss.end()
	}()
	f, err := ss.hello()
	if err != nil {
		return err
	}
	return ss.serve(ss.open(f))
}

// Client is a Go rank's connection to its host's KVServer. Its methods are
// safe for concurrent use but run one at a time. A goroutine of its own
// reads the connection: it hands each reply to the call waiting for it,
// and answers the server's requests (the goroutine dump of
// [KVServer.Dump], the Progress of [KVServer.Progress]) at any time, even
// while a Fence waits or no call is made at all. Close ends it.
type Client struct {
	mu       sync.Mutex // held for a call: one at a time
	broken   error      // set when a call stopped waiting for its reply
	closed   bool
	c        net.Conn
	maxFrame int
	answers  bool // the server takes answers: not an older gorun's

	wmu       sync.Mutex    // serialises writes: calls and answers
	replies   chan []byte   // the reader's replies, for the call in flight
	done      chan struct{} // closed when the reader returned
	rerr      error         // why the reader returned; read after done
	answering sync.WaitGroup
	progress  atomic.Pointer[func() Progress]
}

// errOldServer says that the server refused a hello with features: an
// older gorun's, which takes the hello without them.
var errOldServer = errors.New("rendezvous: the KV server does not take hello features")

// Dial connects to the KVServer socket at path as rank, presenting secret.
func Dial(ctx context.Context, path string, secret []byte, rank int) (*Client, error) {
	cl, err := dial(ctx, path, secret, rank, true)
	if errors.Is(err, errOldServer) {
		cl, err = dial(ctx, path, secret, rank, false)
	}
	return cl, err
}

// dial connects and says hello, offering to answer requests if answers.
func dial(ctx context.Context, path string, secret []byte, rank int, answers bool) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	hello := []string{string(secret), strconv.Itoa(rank)}
	if answers {
		hello = append(hello, featAnswers)
	}
	if err := handshake(ctx, c, encodeFrame(opHello, hello...)); err != nil {
		c.Close()
		var se *serverError
		if answers && errors.As(err, &se) && se.msg == msgHelloExpected {
			return nil, errOldServer
		}
		return nil, err
	}
	cl := &Client{c: c, maxFrame: DefaultMaxFrame, answers: answers, replies: make(chan []byte, 1), done: make(chan struct{})}
	go cl.read()
	return cl, nil
}

// handshake writes hello on c and reads the server's reply, within ctx.
func handshake(ctx context.Context, c net.Conn, hello []byte) error {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	err := func() error {
		if _, err := c.Write(hello); err != nil {
			return err
		}
		p, err := readFrame(c, DefaultMaxFrame)
		if err != nil {
			return err
		}
		return replyErr(opOK, p, nil)
	}()
	if !stop() {
		return ctx.Err()
	}
	return err
}

// replyErr decodes reply payload p: nil for op want, whose first field (if
// any) goes to *out, or the error that p says or is.
func replyErr(want byte, p []byte, out *string) error {
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
		return &serverError{f[0]}
	}
	return fmt.Errorf("%w: unexpected reply op %q", errFrame, op)
}

// serverError is the error that the server replied with.
type serverError struct{ msg string }

func (e *serverError) Error() string { return "rendezvous: server: " + e.msg }

// read reads the connection until it fails: requests are answered in
// goroutines of their own, other frames are replies.
func (cl *Client) read() {
	defer close(cl.done)
	for {
		p, err := readFrame(cl.c, cl.maxFrame)
		if err != nil {
			cl.rerr = err
			return
		}
		if op := p[0]; op == opDump || op == opProgress {
			if _, f, err := decodeFrame(p); err == nil {
				cl.answering.Add(1)
				go func() {
					defer cl.answering.Done()
					cl.answer(op, f[0])
				}()
				continue
			}
		}
		select {
		case cl.replies <- p:
		default: // no call waits for it (it stopped waiting): dropped
		}
	}
}

// answer answers the server's request op with id.
func (cl *Client) answer(op byte, id string) {
	var body []byte
	switch op {
	case opDump:
		body = stacks(MaxDump)
	case opProgress:
		body = marshalProgress(cl.currentProgress(), MaxDump)
	}
	cl.write(encodeFrame(opAnswer, id, string(body)))
}

// write writes frame b, after any other write in progress.
func (cl *Client) write(b []byte) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	_, err := cl.c.Write(b)
	return err
}

// SetProgress has the client report what f returns as its Progress: to
// the server when asked ([KVServer.Progress]) and with its goodbye
// ([KVServer.Final]). f must be safe to call from another goroutine at
// any time, and quick. collectives.Init and InitWith set it to the world
// communicator's Progress; nil reports the zero Progress.
func (cl *Client) SetProgress(f func() Progress) {
	if f == nil {
		cl.progress.Store(nil)
		return
	}
	cl.progress.Store(&f)
}

func (cl *Client) currentProgress() Progress {
	if f := cl.progress.Load(); f != nil {
		return (*f)()
	}
	return Progress{}
}

// call sends req and waits for its reply; want is the op of success, whose
// first field (if any) goes to *out. A call that stops waiting because
// ctx ended leaves the client unusable: its reply would come later.
func (cl *Client) call(ctx context.Context, want byte, req []byte, out *string) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.broken != nil {
		return cl.broken
	}
	if err := cl.write(req); err != nil {
		return err
	}
	var p []byte
	select {
	case p = <-cl.replies:
	case <-cl.done:
		select {
		case p = <-cl.replies: // came before the reader ended
		default:
			return cl.rerr
		}
	case <-ctx.Done():
		cl.broken = fmt.Errorf("rendezvous: client unusable after a call that stopped waiting: %w", ctx.Err())
		return ctx.Err()
	}
	return replyErr(want, p, out)
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
// client is unusable, but it still answers the server's requests until
// Close.
func (cl *Client) Fence(ctx context.Context) error {
	return cl.call(ctx, opOK, encodeFrame(opFence), nil)
}

// Close says goodbye (so the server does not report an early exit), with
// the client's final Progress if it has one (see SetProgress), closes the
// connection and waits for the client's goroutines to end. A client whose
// call stopped waiting (a Fence whose ctx ended) closes without a goodbye.
func (cl *Client) Close() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return cl.c.Close()
	}
	cl.closed = true
	if cl.broken == nil {
		bye := encodeFrame(opBye)
		if f := cl.progress.Load(); f != nil && cl.answers {
			bye = encodeFrame(opBye, string(marshalProgress((*f)(), MaxDump)))
		}
		if cl.write(bye) == nil {
			select {
			case <-cl.replies:
			case <-cl.done:
			}
		}
	}
	err := cl.c.Close()
	<-cl.done
	cl.answering.Wait()
	return err
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

// PeerPID returns the pid of the process that holds rank's connection
// (from the unix socket's credentials), or 0 when the rank has none.
func (s *KVServer) PeerPID(rank int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.clients[rank]; k != nil {
		return k.pid
	}
	return 0
}

// peerPID reads the pid of a unix socket's peer; 0 for other conns.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
