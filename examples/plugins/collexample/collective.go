package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/gorun/gorun/plugins/sdk"
)

// maxCount is the largest element count claimed: larger ones would overflow
// a byte count of 8-byte elements, and are declined.
const maxCount = math.MaxInt / 8

// errProtocol is wrapped by the errors about what a peer sent that this
// plugin's wire protocol does not allow.
var errProtocol = errors.New("collexample: protocol error")

// collective is one rank's instance of the plugin's sdk.Collective.
//
// Algorithm: every allreduce is a direct all-to-all exchange. Each rank
// sends its whole input to every other rank over their connection, receives
// every other rank's whole input, and then sums the Size inputs element by
// element in rank order (rank 0's value, plus rank 1's, plus rank 2's, ...),
// in the element type's own arithmetic. Every rank thus performs the very
// same additions in the very same order, so all ranks get bit-identical
// results, equal to a serial sum in rank order. It moves (Size-1) times the
// buffer in each direction per rank, which is fine for an example and for
// small jobs; a ring or a vendor library is what scales.
//
// Operations run one at a time, in Start order, on a worker goroutine that
// Join starts; each runs one sending and one receiving goroutine per peer.
// Since every rank starts the same operations in the same order and TCP
// keeps order, the k-th message on a connection belongs to the k-th
// operation; each message carries its operation's number and length, which
// the receiver checks.
//
// An operation fails with an error wrapping sdk.ErrPeerLost, naming the
// peer's rank, when a peer that it still has to exchange data with goes
// away: a closed peer or a dead process shows at once as the end of the
// connection, a host that vanished within seconds through TCP keep-alive
// and TCP_USER_TIMEOUT. (A peer that leaves after its data arrived does not
// fail the operation, so that ranks may close at the end of a job in any
// order.) Once an operation fails, the connections are out of step, so
// every later one fails with the first failure's error.
type collective struct {
	log      hclog.Logger
	cfgRank  int // sdk.Config's Rank; -1 outside a job
	ln       *net.TCPListener
	handle   []byte // ln's "ip:port"
	ran      atomic.Int64
	declined atomic.Int64
	failed   atomic.Int64
	wg       sync.WaitGroup // the worker goroutine

	mu     sync.Mutex
	cond   *sync.Cond // signalled when queue grows or closed is set
	joined bool       // Join was called
	closed bool       // Close was called
	rank   int        // cfg.Rank, then the rank that Join found
	size   int        // set by a successful Join, with peers
	peers  []*peer    // by rank; nil for this rank
	queue  []*job     // started and not yet taken by the worker
	seq    uint64     // number of the last operation started
	err    error      // the first failure; the mesh is unusable after it
}

// peer is the connection to one other rank.
type peer struct {
	rank int
	conn *net.TCPConn
}

// job is one started operation.
type job struct {
	seq        uint64
	op         sdk.Op
	send, recv []byte // exactly the operation's bytes
	req        *request
}

// request is the sdk.Request of a job; the worker completes it once.
type request struct {
	done chan struct{} // closed once n and err are set
	n    int
	err  error
}

func newRequest() *request { return &request{done: make(chan struct{})} }

// Test reports whether the operation is done, and then the number of bytes
// it wrote to recv and its error.
func (r *request) Test() (bool, int, error) {
	select {
	case <-r.done:
		return true, r.n, r.err
	default:
		return false, 0, nil
	}
}

func (r *request) finish(n int, err error) {
	r.n, r.err = n, err
	close(r.done)
}

// newCollective makes one rank's collective: it listens on the first IPv4
// address of cfg.Iface (127.0.0.1 when cfg.Iface is empty), whose "ip:port"
// is the Handle.
func newCollective(cfg sdk.Config) (sdk.Collective, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ip, err := listenIP(cfg.Iface)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: ip})
	if err != nil {
		return nil, fmt.Errorf("collexample: listen on %s: %w", ip, err)
	}
	c := &collective{
		log:     log,
		cfgRank: cfg.Rank,
		rank:    cfg.Rank,
		ln:      ln,
		handle:  []byte(ln.Addr().String()),
	}
	c.cond = sync.NewCond(&c.mu)
	return c, nil
}

// listenIP returns the address to listen on: the first IPv4 address of the
// interface that iface names ("eth0" or, as gorun's --iface writes an exact
// name, "=eth0"), or 127.0.0.1 when iface is empty. Lists, prefixes and
// exclusions in NCCL_SOCKET_IFNAME syntax are not supported.
func listenIP(iface string) (net.IP, error) {
	if iface == "" {
		return net.IPv4(127, 0, 0, 1), nil
	}
	name := strings.TrimPrefix(iface, "=")
	if name == "" || strings.ContainsAny(name, ",^") {
		return nil, fmt.Errorf("collexample: interface %q: want one interface name", iface)
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("collexample: interface %q: %w", iface, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("collexample: addresses of interface %q: %w", name, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip4 := ipn.IP.To4(); ip4 != nil {
				return ip4, nil
			}
		}
	}
	return nil, fmt.Errorf("collexample: interface %q has no IPv4 address", name)
}

// Handle returns this rank's listening address, "ip:port".
func (c *collective) Handle() []byte { return bytes.Clone(c.handle) }

// claims reports whether the plugin runs op, and then the size of op's
// elements in bytes. It looks at op alone, so that every rank decides alike.
func claims(op sdk.Op) (esize int, ok bool) {
	if op.Kind != "allreduce" || op.RedOp != "sum" || op.Count < 1 || op.Count > maxCount {
		return 0, false
	}
	switch op.DType {
	case "float32":
		return 4, true
	case "float64":
		return 8, true
	}
	return 0, false
}

// Start starts an allreduce sum of float32 or float64 and declines any
// other operation. The work happens on the worker goroutine; Start only
// queues it. send and recv may be the same memory.
func (c *collective) Start(op sdk.Op, send, recv []byte) (sdk.Request, error) {
	esize, ok := claims(op)
	if !ok {
		c.declined.Add(1)
		c.log.Trace("declined", "kind", op.Kind, "dtype", op.DType, "redop", op.RedOp, "count", op.Count)
		return nil, sdk.ErrDeclined
	}
	n := op.Count * esize
	if len(send) < n || len(recv) < n {
		return nil, fmt.Errorf("collexample: allreduce of %d %s needs %d bytes in send and recv, got %d and %d",
			op.Count, op.DType, n, len(send), len(recv))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, fmt.Errorf("collexample: allreduce: %w", sdk.ErrClosed)
	case c.peers == nil:
		return nil, errors.New("collexample: allreduce started before a successful Join")
	case op.Rank != c.rank || op.Size != c.size:
		return nil, fmt.Errorf("collexample: allreduce for rank %d of %d, but this is rank %d of %d",
			op.Rank, op.Size, c.rank, c.size)
	}
	c.seq++
	j := &job{seq: c.seq, op: op, send: send[:n], recv: recv[:n], req: newRequest()}
	c.ran.Add(1)
	c.queue = append(c.queue, j)
	c.cond.Signal()
	return j.req, nil
}

// work runs the queued jobs in order until Close, then fails those left.
func (c *collective) work() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		if c.closed {
			left := c.queue
			c.queue = nil
			c.mu.Unlock()
			for _, j := range left {
				c.failed.Add(1)
				j.req.finish(0, fmt.Errorf("collexample: allreduce %d: %w", j.seq, sdk.ErrClosed))
			}
			return
		}
		j := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		broken := c.err
		c.mu.Unlock()

		var err error
		if broken != nil {
			err = fmt.Errorf("collexample: allreduce %d not run, an earlier one failed: %w", j.seq, broken)
		} else {
			err = c.allreduce(j)
		}
		if err != nil {
			c.failed.Add(1)
			j.req.finish(0, err)
			continue
		}
		j.req.finish(len(j.recv), nil)
	}
}

// allreduce runs one job: the exchange with every peer, then the sum in
// rank order.
func (c *collective) allreduce(j *job) error {
	// A copy of the input, so that the input stays intact while it is sent
	// even where recv is the same memory as send, and the sum can write
	// recv in one pass.
	own := bytes.Clone(j.send)
	parts := make([][]byte, c.size)
	parts[c.rank] = own
	var wg sync.WaitGroup
	for r, p := range c.peers {
		if p == nil {
			continue
		}
		parts[r] = make([]byte, len(own))
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := p.write(j.seq, own); err != nil {
				c.fail(j, p, "send to", err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := p.read(j.seq, parts[r]); err != nil {
				c.fail(j, p, "receive from", err)
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	switch j.op.DType {
	case "float32":
		sumFloat32(j.recv, parts)
	case "float64":
		sumFloat64(j.recv, parts)
	}
	return nil
}

// fail records the failure of a transfer with p, unless an earlier failure
// was recorded, and then stops every transfer in flight (without closing
// the connections, so that the peers do not take this rank for lost). An
// I/O error means the peer went away (sdk.ErrPeerLost), or, after Close,
// that this side closed (sdk.ErrClosed).
func (c *collective) fail(j *job, p *peer, what string, err error) {
	c.mu.Lock()
	first := c.err == nil
	if first {
		cause := sdk.ErrPeerLost
		switch {
		case c.closed:
			cause = sdk.ErrClosed
		case errors.Is(err, errProtocol):
			cause = nil
		}
		if cause == nil {
			c.err = fmt.Errorf("collexample: allreduce %d: %s rank %d (%s): %w",
				j.seq, what, p.rank, p.conn.RemoteAddr(), err)
		} else {
			c.err = fmt.Errorf("collexample: allreduce %d: %s rank %d (%s): %w: %w",
				j.seq, what, p.rank, p.conn.RemoteAddr(), cause, err)
		}
	}
	c.mu.Unlock()
	if first {
		for _, q := range c.peers {
			if q != nil {
				q.abort()
			}
		}
	}
}

// sumFloat32 writes to dst, element by element, the float32 sum of parts in
// their order. Each part holds as many bytes as dst.
func sumFloat32(dst []byte, parts [][]byte) {
	ne := binary.NativeEndian
	for i := 0; i+4 <= len(dst); i += 4 {
		acc := math.Float32frombits(ne.Uint32(parts[0][i:]))
		for _, p := range parts[1:] {
			acc += math.Float32frombits(ne.Uint32(p[i:]))
		}
		ne.PutUint32(dst[i:], math.Float32bits(acc))
	}
}

// sumFloat64 is sumFloat32 for float64.
func sumFloat64(dst []byte, parts [][]byte) {
	ne := binary.NativeEndian
	for i := 0; i+8 <= len(dst); i += 8 {
		acc := math.Float64frombits(ne.Uint64(parts[0][i:]))
		for _, p := range parts[1:] {
			acc += math.Float64frombits(ne.Uint64(p[i:]))
		}
		ne.PutUint64(dst[i:], math.Float64bits(acc))
	}
}

// Close closes the listener and every connection, fails the operations not
// done with sdk.ErrClosed, waits for the plugin's goroutines and logs what
// the collective ran and declined. Calling it again does nothing.
func (c *collective) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	peers := c.peers
	c.cond.Broadcast()
	c.mu.Unlock()

	var errs []error
	if err := c.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, fmt.Errorf("collexample: close listener: %w", err))
	}
	for _, p := range peers {
		if p != nil {
			if err := p.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, fmt.Errorf("collexample: close connection to rank %d: %w", p.rank, err))
			}
		}
	}
	c.wg.Wait()
	c.log.Info("closed", "rank", c.rank, "ran", c.ran.Load(), "declined", c.declined.Load(), "failed", c.failed.Load())
	return errors.Join(errs...)
}
