// Command testplugin is the plugin the plugins package's tests start: a
// transport over Unix sockets with faults to inject, and a collective that
// sums float64s. Faults, by environment:
//
//	TESTPLUGIN_CRASH_AFTER=N   exit with status 3 after sending N messages
//	TESTPLUGIN_INIT_FAIL=msg   fail the transport's start with msg
//	TESTPLUGIN_PANIC=1         panic at start (a crash before the handshake)
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
)

func main() {
	if os.Getenv("TESTPLUGIN_PANIC") != "" {
		panic("testplugin: asked to panic")
	}
	sdk.Serve(sdk.Plugin{
		Name: "testplugin", Version: "0.0.1", Description: "the plugins package's test plugin",
		Transport:  newTransport,
		Collective: newCollective,
	})
}

type tr struct {
	dir   string
	sent  atomic.Int64
	crash int64
	log   func(string, ...any)
}

func newTransport(cfg sdk.Config) (sdk.Transport, error) {
	if msg := os.Getenv("TESTPLUGIN_INIT_FAIL"); msg != "" {
		cfg.Logger.Error("refusing to start", "error", msg)
		return nil, errors.New(msg)
	}
	dir, err := os.MkdirTemp("", "testplugin")
	if err != nil {
		return nil, err
	}
	t := &tr{dir: dir, crash: -1}
	if s := os.Getenv("TESTPLUGIN_CRASH_AFTER"); s != "" {
		t.crash, _ = strconv.ParseInt(s, 10, 64)
	}
	t.log = cfg.Logger.Info
	return t, nil
}

func (t *tr) Devices(context.Context) ([]sdk.Device, error) {
	return []sdk.Device{{Name: "unix", NUMA: -1, Note: "test"}}, nil
}

var lisN atomic.Int64

func (t *tr) Listen(context.Context) (sdk.Listener, error) {
	p := filepath.Join(t.dir, strconv.FormatInt(lisN.Add(1), 10))
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, err
	}
	return &lis{l: l.(*net.UnixListener), h: handle(p)}, nil
}

func (t *tr) Connect(ctx context.Context, h []byte) (sdk.SendConn, error) {
	p, ok := parseHandle(h)
	if !ok {
		return nil, fmt.Errorf("%w: not a testplugin handle", sdk.ErrBadHandle)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sdk.ErrPeerLost, err)
	}
	return &conn{c: c, t: t}, nil
}

func (t *tr) Register([]byte) (sdk.Registration, error) { return nil, nil }
func (t *tr) Deregister(sdk.Registration) error         { return nil }
func (t *tr) Close() error                              { return os.RemoveAll(t.dir) }

// handle is "tp", the path's length and checksum, and the path.
func handle(p string) []byte {
	return append([]byte{'t', 'p', byte(len(p)), byte(crc32.ChecksumIEEE([]byte(p)))}, p...)
}

func parseHandle(h []byte) (string, bool) {
	if len(h) < 4 || h[0] != 't' || h[1] != 'p' || int(h[2]) != len(h)-4 || h[3] != byte(crc32.ChecksumIEEE(h[4:])) {
		return "", false
	}
	return string(h[4:]), true
}

type lis struct {
	l *net.UnixListener
	h []byte
}

func (l *lis) Handle() []byte { return l.h }
func (l *lis) Accept(ctx context.Context) (sdk.RecvConn, error) {
	stop := context.AfterFunc(ctx, func() { l.l.SetDeadline(time.Now()) })
	defer stop()
	c, err := l.l.Accept()
	l.l.SetDeadline(time.Time{})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", sdk.ErrClosed, err)
	}
	return &conn{c: c}, nil
}
func (l *lis) Close() error { return l.l.Close() }

// conn does each transfer in a goroutine, one at a time per direction.
type conn struct {
	c  net.Conn
	t  *tr
	mu sync.Mutex // orders sends
}

type req struct {
	done atomic.Bool
	n    int
	err  error
}

func (r *req) Test() (bool, int, error) {
	if !r.done.Load() {
		return false, 0, nil
	}
	return true, r.n, r.err
}

func (c *conn) Peer() string { return "unix" }
func (c *conn) Close() error { return c.c.Close() }

func lost(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: %v", sdk.ErrClosed, err)
	}
	return fmt.Errorf("%w: %v", sdk.ErrPeerLost, err)
}

func (c *conn) Send(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	r := &req{}
	c.mu.Lock()
	go func() {
		defer c.mu.Unlock()
		var h [8]byte
		binary.LittleEndian.PutUint64(h[:], uint64(len(buf)))
		_, err := c.c.Write(append(h[:], buf...))
		if err != nil {
			r.err = lost(err)
		}
		r.n = len(buf)
		r.done.Store(true)
		if n := c.t.sent.Add(1); n == c.t.crash {
			c.t.log("crashing as asked", "messages", n)
			os.Exit(3)
		}
	}()
	return r, nil
}

func (c *conn) Recv(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	r := &req{}
	go func() {
		var h [8]byte
		if _, err := io.ReadFull(c.c, h[:]); err != nil {
			r.err = lost(err)
		} else if n := binary.LittleEndian.Uint64(h[:]); n > uint64(len(buf)) {
			r.err = fmt.Errorf("message of %d bytes for a %d-byte buffer", n, len(buf))
		} else if _, err := io.ReadFull(c.c, buf[:n]); err != nil {
			r.err = lost(err)
		} else {
			r.n = int(n)
		}
		r.done.Store(true)
	}()
	return r, nil
}

// coll sums float64 allreduces through files in a shared directory: each
// rank writes its input, waits for the others', and sums in rank order.
type coll struct {
	rank, size int
	dir        string
	seq        int
	ran        atomic.Int64
	log        func(string, ...any)
}

func newCollective(cfg sdk.Config) (sdk.Collective, error) {
	return &coll{rank: cfg.Rank, size: cfg.Size, log: cfg.Logger.Info}, nil
}

func (c *coll) Handle() []byte {
	if c.rank == 0 {
		d, _ := os.MkdirTemp("", "testcoll")
		c.dir = d
	}
	return []byte(c.dir)
}

func (c *coll) Join(_ context.Context, handles [][]byte) error {
	c.dir = string(handles[0])
	return nil
}

func (c *coll) Start(op sdk.Op, send, recv []byte) (sdk.Request, error) {
	if op.Kind != "allreduce" || op.RedOp != "sum" || op.DType != "float64" || op.Count == 0 {
		return nil, sdk.ErrDeclined
	}
	c.seq++
	seq := c.seq
	r := &req{}
	in := append([]byte(nil), send...)
	go func() {
		name := func(rank int) string { return filepath.Join(c.dir, fmt.Sprintf("%d.%d", seq, rank)) }
		tmp := name(c.rank) + ".tmp"
		if err := os.WriteFile(tmp, in, 0o600); err == nil {
			os.Rename(tmp, name(c.rank))
		}
		sum := make([]float64, op.Count)
		for k := range c.size {
			var b []byte
			for {
				var err error
				if b, err = os.ReadFile(name(k)); err == nil {
					break
				}
			}
			for i := range sum {
				sum[i] += math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
			}
		}
		for i, v := range sum {
			binary.LittleEndian.PutUint64(recv[8*i:], math.Float64bits(v))
		}
		r.n = len(recv)
		c.log("ran allreduce", "count", op.Count, "total", c.ran.Add(1))
		r.done.Store(true)
	}()
	return r, nil
}

func (c *coll) Close() error { return nil }
