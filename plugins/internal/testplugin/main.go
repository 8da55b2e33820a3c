// Command testplugin is the plugin the plugins package's tests start: a
// transport over Unix sockets with faults to inject. Faults, by
// environment:
//
//	TESTPLUGIN_CRASH_AFTER=N   exit with status 3 after sending N messages
//	TESTPLUGIN_CRASH_RANK=R    only in rank R's plugin
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
	"net"
	"os"
	"path/filepath"
	"strconv"
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
		Transport: newTransport,
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
	if r := os.Getenv("TESTPLUGIN_CRASH_RANK"); r != "" && r != strconv.Itoa(cfg.Rank) {
		t.crash = -1
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

// conn does each transfer in a goroutine, one at a time per direction:
// each send's goroutine waits for the previous one's (Send must not
// block the SDK's loop).
type conn struct {
	c    net.Conn
	t    *tr
	last chan struct{} // closed when the last send so far is written
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
	prev, mine := c.last, make(chan struct{})
	c.last = mine
	go func() {
		defer close(mine)
		if prev != nil {
			<-prev
		}
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
