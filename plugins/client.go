package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/tcp"
)

// EnvLogLevel sets the level at which a rank shows its plugins' log
// entries ("trace" ... "error", "off"); default "warn". The plugin sees the
// same variable.
const EnvLogLevel = env.PluginLog

// Options says which transport or collective plugin to open, and for which
// rank.
type Options struct {
	// Name is the plugin's name ("fabric"); the binary is found as
	// gorun-plugin-<Name> in Dirs and the standard directories.
	Name string
	// Path is the binary; when set, Name only names it in messages (and
	// defaults to the binary's name).
	Path string
	// Dirs are searched before the standard directories (--plugin-dir).
	Dirs []string
	// Rank, Size and LocalRank place the rank; -1 outside a job.
	Rank, Size, LocalRank int
	// Iface is the interface the job's traffic should use, or "".
	Iface string
	// PluginOptions are the plugin's options (--plugin-opt key=value).
	PluginOptions map[string]string
	// Log receives the plugin's log entries (default standard error).
	Log io.Writer
	// StartTimeout bounds the start and handshake (default 20s).
	StartTimeout time.Duration
	// NoHandoff keeps the plugin on the data path even when it could hand
	// its connections' sockets to the rank (sdk.Handoff; a rank's
	// GORUN_PLUGIN_HANDOFF=0).
	NoHandoff bool
}

// Info describes a plugin, as it describes itself.
type Info struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
	Transport   bool   `json:"transport"`
	Collective  bool   `json:"collective"`
	// Memory says the plugin manages device memory (sdk.Memory).
	Memory bool `json:"memory,omitempty"`
}

// Client is an open plugin process serving one rank: its control
// connection and the data plane shared with it.
type Client struct {
	name string
	path string
	info Info
	p    *Plugin
	ctl  *wire.Client
	tail *logTail
	seg  *wire.Segment
	sock *net.UnixConn
	mine *wire.Bell // the host sleeps on it
	bell *wire.Bell // the plugin's: rung to wake it

	sockMu  sync.Mutex
	shared  map[uint64]bool // regions the plugin has mapped
	bounces bouncePool

	sqMu  sync.Mutex
	sqOut []sqRec

	cqMu   sync.Mutex
	reqs   map[uint64]*hreq
	nextID atomic.Uint64

	spinners   atomic.Int32
	reaperWake chan struct{}

	lost     atomic.Pointer[error]
	lostOnce sync.Once
	closed   chan struct{}
	closeMu  sync.Mutex
	done     bool
	tr       *Transport

	// handoff is set when the plugin hands every connection's sockets
	// over; sockets then runs gorun's TCP protocol on them.
	handoff bool
	sockets *tcp.Transport
}

type sqRec struct {
	typ     uint32
	a, b, c uint64
	payload []byte
}

// Open starts the plugin for one rank: it finds the binary, starts it in
// its own process group with a parent-death signal, completes go-plugin's
// handshake (gRPC, mutual TLS), shares the data-plane segment, and
// initializes the plugin's transport and collective.
func Open(o Options) (*Client, error) {
	path := o.Path
	if path == "" {
		var err error
		if path, err = Lookup(o.Name, o.Dirs); err != nil {
			return nil, err
		}
	}
	name := o.Name
	if name == "" {
		name = strings.TrimPrefix(filepath.Base(path), BinaryPrefix)
	}
	c := &Client{
		name: name, path: path, tail: newLogTail(20),
		shared: map[uint64]bool{}, reqs: map[uint64]*hreq{},
		reaperWake: make(chan struct{}, 1), closed: make(chan struct{}),
	}
	c.bounces.c = c
	if err := c.start(o); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Client) fail(err error) error {
	return fmt.Errorf("plugin %s (%s): %w%s", c.name, c.path, err, c.tail.suffix())
}

// start starts the plugin process with the data plane's descriptors,
// takes this side's ends of them, and asks the plugin who it is and to
// serve the rank of o.
func (c *Client) start(o Options) error {
	fds, err := newPlaneFDs()
	if err != nil {
		return c.fail(err)
	}
	// The child's copies are closed once it started (or failed to).
	defer fds.closeChild()
	p, err := Start(Spec{
		Name: c.name, Path: c.path,
		Handshake:        wire.Handshake,
		VersionedPlugins: wire.PluginSets(nil),
		DispenseName:     wire.PluginName,
		ExtraFiles:       fds.child,
		Stderr:           c.tail,
		Logger:           pluginLogger(o.Log),
		StartTimeout:     o.StartTimeout,
	})
	if err != nil {
		fds.closeKept()
		return fmt.Errorf("%w%s", err, c.tail.suffix())
	}
	c.p = p
	c.ctl = p.Service.(*wire.Client)
	// From here on Close releases what this side holds.
	if err := c.attach(fds); err != nil {
		c.Close()
		return c.fail(err)
	}
	if err := c.handshake(o); err != nil {
		c.Close()
		return c.fail(err)
	}
	go c.watch()
	go c.reap()
	return nil
}

// pluginLogger is the logger of a plugin's log entries, written to out
// (default standard error) from the level EnvLogLevel says (default warn).
func pluginLogger(out io.Writer) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv(EnvLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	if out == nil {
		out = os.Stderr
	}
	return hclog.New(&hclog.LoggerOptions{Name: "plugin", Level: level, Output: out})
}

// planeFDs are the descriptors of a plugin's data plane: the segment, the
// region socket's two ends and two bells. The plugin process gets copies
// of them (child, in the order it expects them); this side keeps its end
// of the socket and the bells, and maps the segment.
type planeFDs struct {
	seg   int    // the segment; child's first file is it, so it lives until closeChild
	sock  int    // this side's end of the region socket
	bells [2]int // the plugin's bell and the host's
	child []*os.File
}

// newPlaneFDs makes the data plane's descriptors; on an error it closes
// what it made.
func newPlaneFDs() (*planeFDs, error) {
	segFD, err := wire.NewSegment()
	if err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(segFD)
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	f := &planeFDs{seg: segFD, sock: pair[0], bells: [2]int{-1, -1}}
	for i := range f.bells {
		if f.bells[i], err = wire.NewBellFD(); err != nil {
			break
		}
	}
	f.child = []*os.File{
		os.NewFile(uintptr(segFD), "segment"),
		os.NewFile(uintptr(pair[1]), "region-socket"),
	}
	for _, fd := range f.bells {
		if fd >= 0 {
			d, derr := unix.Dup(fd)
			if derr != nil {
				err = derr
			}
			f.child = append(f.child, os.NewFile(uintptr(d), "bell"))
		}
	}
	if err != nil {
		f.closeChild()
		f.closeKept()
		return nil, err
	}
	return f, nil
}

// closeChild closes the plugin's copies (and with them the segment's
// descriptor).
func (f *planeFDs) closeChild() {
	for _, cf := range f.child {
		cf.Close()
	}
}

// closeKept closes this side's end of the socket and the bells, before
// attach took them.
func (f *planeFDs) closeKept() {
	unix.Close(f.sock)
	for _, fd := range f.bells {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// attach takes this side's descriptors of the data plane: the bells, the
// region socket and a mapping of the segment. What it did not take when it
// fails, it closes; what it took, Close releases.
func (c *Client) attach(fds *planeFDs) error {
	var err error
	if c.mine, err = wire.OpenBell(fds.bells[1], "host-bell"); err != nil {
		unix.Close(fds.bells[0])
		unix.Close(fds.sock)
		return err
	}
	if c.bell, err = wire.OpenBell(fds.bells[0], "plugin-bell"); err != nil {
		unix.Close(fds.sock)
		return err
	}
	f := os.NewFile(uintptr(fds.sock), "region-socket")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return err
	}
	c.sock = fc.(*net.UnixConn)
	segFD, err := unix.Dup(fds.seg)
	if err != nil {
		return err
	}
	c.seg, err = wire.MapSegment(segFD, true)
	unix.Close(segFD)
	return err
}

// handshake asks the plugin who it is (a plugin looked up by name must
// say that name) and to serve the rank of o, and notes whether it hands
// its connections' sockets over.
func (c *Client) handshake(o Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var info wire.InfoReply
	if err := c.ctl.Call(ctx, "Info", &wire.Empty{}, &info); err != nil {
		return fmt.Errorf("info: %w", err)
	}
	c.info = Info(info)
	if o.Name != "" && info.Name != o.Name && o.Path == "" {
		return fmt.Errorf("the binary says it is plugin %q", info.Name)
	}
	init := &wire.InitReq{Rank: o.Rank, Size: o.Size, LocalRank: o.LocalRank, Iface: o.Iface, Options: o.PluginOptions, Handoff: !o.NoHandoff}
	var ir wire.InitReply
	if err := c.ctl.Call(ctx, "Init", init, &ir); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if ir.Handoff {
		var err error
		if c.sockets, err = tcp.ForSockets(c.name+" (handed off)", tcp.Options{}); err != nil {
			return err
		}
		c.handoff = true
	}
	return nil
}

// Name returns the plugin's name.
func (c *Client) Name() string { return c.name }

// Path returns the plugin's binary.
func (c *Client) Path() string { return c.path }

// Info returns what the plugin says of itself.
func (c *Client) Info() Info { return c.info }

// Devices asks the plugin's transport for the devices it can use.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	var r wire.DevicesReply
	if err := c.ctl.Call(ctx, "Devices", &wire.Empty{}, &r); err != nil {
		return nil, c.fail(fmt.Errorf("devices: %w", err))
	}
	out := make([]Device, len(r.Devices))
	for i, d := range r.Devices {
		out[i] = Device(d)
	}
	return out, nil
}

// Device is one device a plugin's transport can use.
type Device struct {
	Name      string `json:"name"`
	Provider  string `json:"provider,omitempty"`
	PCI       string `json:"pci,omitempty"`
	NUMA      int    `json:"numa"`
	SpeedMbps int    `json:"speed_mbps,omitempty"`
	Note      string `json:"note,omitempty"`
}

// LastLog returns the plugin's last log lines.
func (c *Client) LastLog() []string { return c.tail.lines() }

// Close stops the plugin: it fails every request still in flight with
// transport.ErrClosed, asks the plugin to exit (and kills it if it does not
// within 2s), and releases the shared memory. Close is idempotent.
func (c *Client) Close() error {
	c.closeMu.Lock()
	if c.done {
		c.closeMu.Unlock()
		return nil
	}
	c.done = true
	c.closeMu.Unlock()
	close(c.closed)
	c.failAll(func(r *hreq) error {
		return r.conn.opErr(r.op, fmt.Errorf("%w: plugin %s closed", transport.ErrClosed, c.name))
	})
	if c.p != nil {
		c.p.Stop()
	}
	if c.sock != nil {
		c.sock.Close()
	}
	if c.mine != nil {
		c.mine.Close()
	}
	if c.bell != nil {
		c.bell.Close()
	}
	c.bounces.close()
	// The segment stays mapped: a Test racing with Close may still read
	// it; it is one small mapping per plugin, released at exit.
	return nil
}

// watch fails everything when the plugin process exits on its own.
func (c *Client) watch() {
	select {
	case <-c.closed:
		return
	case <-c.ctl.Exited():
	}
	select {
	case <-c.closed:
		return
	default:
	}
	// Let the last log lines arrive.
	time.Sleep(20 * time.Millisecond)
	err := fmt.Errorf("%w: plugin %s (%s) exited%s", transport.ErrTransportLost, c.name, c.path, c.tail.suffix())
	c.lostOnce.Do(func() { c.lost.Store(&err) })
	c.failAll(func(r *hreq) error { return r.conn.opErr(r.op, err) })
	if c.mine != nil {
		c.mine.Ring()
	}
}

// lostErr returns the error of a plugin that exited, or nil.
func (c *Client) lostErr() error {
	if p := c.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// failAll fails every request in flight with the error f gives.
func (c *Client) failAll(f func(*hreq) error) {
	c.cqMu.Lock()
	reqs := c.reqs
	c.reqs = map[uint64]*hreq{}
	c.cqMu.Unlock()
	for _, r := range reqs {
		r.abandon(f(r))
	}
}

// submit puts a work request on the submission ring (or behind it when it
// is full) and wakes the plugin if it sleeps.
func (c *Client) submit(typ uint32, a, b, cc uint64, payload []byte) {
	c.sqMu.Lock()
	if len(c.sqOut) > 0 || !c.seg.Out.Put(typ, a, b, cc, payload) {
		c.sqOut = append(c.sqOut, sqRec{typ: typ, a: a, b: b, c: cc, payload: bytes.Clone(payload)})
	}
	c.sqMu.Unlock()
	if c.seg.TheyParked() {
		c.bell.Ring()
	}
}

// submitRef is submit with a memory reference as payload.
func (c *Client) submitRef(typ uint32, a, b, cc uint64, ref wire.Ref) {
	var p [wire.RefSize]byte
	ref.Put(p[:])
	c.submit(typ, a, b, cc, p[:])
}

// flushSQ moves work requests that waited for room onto the ring.
func (c *Client) flushSQ() {
	c.sqMu.Lock()
	moved := false
	for len(c.sqOut) > 0 {
		x := c.sqOut[0]
		if !c.seg.Out.Put(x.typ, x.a, x.b, x.c, x.payload) {
			break
		}
		c.sqOut = c.sqOut[1:]
		moved = true
	}
	c.sqMu.Unlock()
	if moved && c.seg.TheyParked() {
		c.bell.Ring()
	}
}

// track registers a request before its work request is submitted.
func (c *Client) track(r *hreq) error {
	if err := c.lostErr(); err != nil {
		return r.conn.opErr(r.op, err)
	}
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	select {
	case <-c.closed:
		return r.conn.opErr(r.op, fmt.Errorf("%w: plugin %s closed", transport.ErrClosed, c.name))
	default:
	}
	r.id = c.nextID.Add(1)
	c.reqs[r.id] = r
	return nil
}

// poll takes the completions the plugin posted and reports whether there
// were any. Concurrent callers do not wait for each other.
func (c *Client) poll() bool {
	if !c.cqMu.TryLock() {
		return false
	}
	work := false
	var done []*hreq
	var res []result
	for range 256 {
		x, ok, err := c.seg.In.Next()
		if err != nil || !ok {
			break
		}
		if x.Type == wire.CQDone {
			if r := c.reqs[x.A]; r != nil {
				delete(c.reqs, x.A)
				done = append(done, r)
				res = append(res, r.result(x))
			}
		}
		c.seg.In.Release(x)
		work = true
	}
	c.cqMu.Unlock()
	for i, r := range done {
		r.finish(res[i])
	}
	if work {
		c.flushSQ()
	}
	return work
}

// Poller methods (internal/request): a Wait spins on poll for a while;
// the reaper takes over when nobody spins.

// Poll implements request.Poller.
func (c *Client) Poll() bool { return c.poll() }

// Spin implements request.Poller.
func (c *Client) Spin() time.Duration { return hostSpin }

// hostSpin is how long a Wait polls the completion ring before it
// parks (see the SDK's spinFor).
const hostSpin = 5 * time.Microsecond

// Polling implements request.Poller.
func (c *Client) Polling() { c.spinners.Add(1) }

// Parking implements request.Poller.
func (c *Client) Parking() {
	if c.spinners.Add(-1) == 0 {
		select {
		case c.reaperWake <- struct{}{}:
		default:
		}
	}
}

// reap takes completions while no Wait spins: it sleeps on the host
// doorbell, which the plugin rings only while this side's parked flag is
// set.
func (c *Client) reap() {
	for {
		select {
		case <-c.closed:
			return
		default:
		}
		if c.spinners.Load() > 0 {
			select {
			case <-c.reaperWake:
			case <-c.closed:
				return
			case <-time.After(time.Millisecond):
			}
			continue
		}
		c.seg.Park()
		c.cqMu.Lock()
		pending := c.seg.In.Pending()
		c.cqMu.Unlock()
		if pending {
			c.seg.Unpark()
			c.poll()
			continue
		}
		err := c.mine.Wait()
		c.seg.Unpark()
		if err != nil {
			return
		}
		c.poll()
	}
}

// result is a completion as read from the ring (its payload copied where
// needed, since the record is released before the request finishes).
type result struct {
	n      int
	status uint64
	text   string
	data   []byte // a device request's reply
}

// logTail keeps the last lines a plugin wrote to its standard error (its
// log, as JSON entries: their message is kept).
type logTail struct {
	mu   sync.Mutex
	max  int
	buf  []string
	rest []byte
}

func newLogTail(max int) *logTail { return &logTail{max: max} }

// Write implements io.Writer.
func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rest = append(t.rest, p...)
	for {
		i := bytes.IndexByte(t.rest, '\n')
		if i < 0 {
			break
		}
		line := string(bytes.TrimSpace(t.rest[:i]))
		t.rest = t.rest[i+1:]
		if line == "" {
			continue
		}
		var e struct {
			Level   string `json:"@level"`
			Message string `json:"@message"`
			Error   string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Message != "" {
			line = "[" + strings.ToUpper(e.Level) + "] " + e.Message
			if e.Error != "" {
				line += ": " + e.Error
			}
		}
		t.buf = append(t.buf, line)
		if len(t.buf) > t.max {
			t.buf = t.buf[1:]
		}
	}
	return len(p), nil
}

func (t *logTail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.buf...)
	if len(t.rest) > 0 {
		out = append(out, string(t.rest))
	}
	return out
}

// suffix formats the last lines for an error message ("" when none).
func (t *logTail) suffix() string {
	l := t.lines()
	if len(l) == 0 {
		return ""
	}
	return "; its last log lines:\n  " + strings.Join(l, "\n  ")
}

func closeFD(fd int) { unix.Close(fd) }
