package pmixbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/procfs"
)

// fake is a bridge Server that records what the agent's side sends.
type fake struct {
	mu     sync.Mutex
	start  *StartRequest
	done   []*FenceDone
	ops    []*Done
	events chan *Event
	slow   chan struct{} // Rank waits for it to close, when set
}

func newFake() *fake { return &fake{events: make(chan *Event, 8)} }

func (f *fake) Start(_ context.Context, r *StartRequest) (*StartReply, error) {
	f.mu.Lock()
	f.start = r
	f.mu.Unlock()
	if r.Nspace == "" {
		return nil, errors.New("no nspace")
	}
	return &StartReply{Env: map[int][]string{2: {"PMIX_RANK=2", "PMIX_NAMESPACE=" + r.Nspace}}}, nil
}

func (f *fake) Events(ctx context.Context, send func(*Event) error) error {
	for {
		select {
		case e := <-f.events:
			if err := send(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (f *fake) FenceDone(_ context.Context, d *FenceDone) (*Empty, error) {
	f.mu.Lock()
	f.done = append(f.done, d)
	f.mu.Unlock()
	return &Empty{}, nil
}

func (f *fake) Rank(_ context.Context, q *RankQuery) (*RankState, error) {
	if f.slow != nil {
		<-f.slow
	}
	return &RankState{Connected: q.Rank == 2, Finalized: false}, nil
}

func (f *fake) Stop(context.Context, *RankQuery) (*Empty, error) { return &Empty{}, nil }

func (f *fake) Done(_ context.Context, d *Done) (*Empty, error) {
	f.mu.Lock()
	f.ops = append(f.ops, d)
	f.mu.Unlock()
	return &Empty{}, nil
}

func (f *fake) Modex(_ context.Context, p *Proc) (*ModexData, error) {
	if p.Rank < 0 {
		return nil, errors.New("no such rank")
	}
	return &ModexData{Data: []byte(p.Nspace)}, nil
}

// pair serves f on one end of a socket pair and returns a client on the
// other, closed at the test's end.
func pair(t *testing.T, f Server) (*Client, chan error) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		file := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(file)
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	served := make(chan error, 1)
	go func() { served <- ServeConn(conns[1], f) }()
	c := NewClient(conns[0])
	t.Cleanup(func() { c.Close() })
	return c, served
}

// Every call round-trips, and events come in order with binary fence data
// intact, those sent before Events was called included.
func TestBridge(t *testing.T) {
	f := newFake()
	c, served := pair(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rep, err := c.Start(ctx, &StartRequest{Nspace: "gorun.j.0", Hosts: []string{"a", "b"}, NodeOf: []int{0, 0, 1, 1}, Node: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Env[2]; len(got) != 2 || got[1] != "PMIX_NAMESPACE=gorun.j.0" {
		t.Errorf("env of rank 2: %q", got)
	}
	if f.start == nil || len(f.start.NodeOf) != 4 || f.start.Hosts[1] != "b" {
		t.Errorf("the plugin got %+v", f.start)
	}
	if _, err := c.Start(ctx, &StartRequest{}); err == nil || err.Error() != "no nspace" {
		t.Errorf("a failing Start returned %v, want the plugin's error", err)
	}

	blob := []byte{0, 1, 2, 0xff, 0, 'x', '\n'}
	f.events <- &Event{Kind: "fence", Nspace: "gorun.j.0", ID: 7, Data: blob}
	f.events <- &Event{Kind: "abort", Nspace: "gorun.j.0", Rank: 3, Status: 9, Msg: "bye\nnow"}
	time.Sleep(50 * time.Millisecond) // both are with the client before Events starts
	got := make(chan *Event, 4)
	ectx, ecancel := context.WithCancel(ctx)
	evErr := make(chan error, 1)
	go func() { evErr <- c.Events(ectx, func(e *Event) { got <- e }) }()
	e1, e2 := <-got, <-got
	if e1.Kind != "fence" || e1.ID != 7 || !bytes.Equal(e1.Data, blob) {
		t.Errorf("fence event: %+v", e1)
	}
	if e2.Kind != "abort" || e2.Rank != 3 || e2.Status != 9 || e2.Msg != "bye\nnow" {
		t.Errorf("abort event: %+v", e2)
	}
	f.events <- &Event{Kind: "fence", ID: 8}
	if e3 := <-got; e3.ID != 8 {
		t.Errorf("an event while Events runs: %+v", e3)
	}
	ecancel()
	if err := <-evErr; err != nil {
		t.Errorf("Events after its ctx ended: %v", err)
	}

	if err := c.FenceDone(ctx, &FenceDone{ID: 7, Data: blob}); err != nil {
		t.Fatal(err)
	}
	if len(f.done) != 1 || !bytes.Equal(f.done[0].Data, blob) {
		t.Errorf("fence done: %+v", f.done)
	}
	st, err := c.Rank(ctx, "gorun.j.0", 2)
	if err != nil || !st.Connected || st.Finalized {
		t.Errorf("rank state: %+v, %v", st, err)
	}
	if err := c.Stop(ctx, "gorun.j.0"); err != nil {
		t.Error(err)
	}
	// Dynamic processes: a spawn's event carries its programs; Done
	// completes it, and Modex fetches a rank's data.
	f.events <- &Event{Kind: EventSpawn, Nspace: "gorun.j.0", ID: 9, Rank: 1, Spawn: []SpawnApp{{Cmd: "./c", Argv: []string{"./c", "x y"},
		Env: []string{"OMPI_PARENT_PORT=p"}, MaxProcs: 2, Info: []KV{{Key: "pmix.wdir", Value: "/tmp"}}}},
		Info: []KV{{Key: "pmix.mapby", Value: "\x01PMIX_DATA_ARRAY"}}}
	ectx, ecancel = context.WithCancel(ctx)
	go c.Events(ectx, func(e *Event) { got <- e })
	if e := <-got; e.Kind != EventSpawn || len(e.Spawn) != 1 || e.Spawn[0].Argv[1] != "x y" || e.Spawn[0].MaxProcs != 2 || e.Spawn[0].Info[0].Value != "/tmp" {
		t.Errorf("spawn event: %+v", e)
	} else if typ, ok := e.Info[0].Unconvertible(); !ok || typ != "PMIX_DATA_ARRAY" {
		t.Errorf("an unconvertible value reads as %q, %v", typ, ok)
	}
	ecancel()
	if err := c.Done(ctx, &Done{ID: 9, Kind: EventSpawn, Nspace: "gorun.j.0.1"}); err != nil || len(f.ops) != 1 || f.ops[0].Nspace != "gorun.j.0.1" {
		t.Errorf("done: %v, %+v", err, f.ops)
	}
	if data, err := c.Modex(ctx, Proc{Nspace: "gorun.j.0.1", Rank: 1}); err != nil || string(data) != "gorun.j.0.1" {
		t.Errorf("modex: %q, %v", data, err)
	}
	if _, err := c.Modex(ctx, Proc{Nspace: "n", Rank: Wildcard}); err == nil {
		t.Error("a failing Modex returned no error")
	}
	if b, ok := Bytes("\x0200ff10"); !ok || !bytes.Equal(b, []byte{0, 0xff, 0x10}) {
		t.Errorf("Bytes: %x, %v", b, ok)
	}
	if err := c.call(ctx, "Nope", &Empty{}, &Empty{}); err == nil || !strings.Contains(err.Error(), `no method "Nope"`) {
		t.Errorf("an unknown method: %v", err)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Errorf("ServeConn after the agent closed: %v", err)
	}
}

// Calls are answered out of order: a slow one holds up no other, and a
// call whose ctx ends returns at once. When the plugin's end goes, a call
// in flight fails saying so, and Events returns why.
func TestBridgeConcurrentAndLost(t *testing.T) {
	f := newFake()
	f.slow = make(chan struct{})
	c, _ := pair(t, f)
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() { _, err := c.Rank(ctx, "n", 2); slow <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := c.Stop(ctx, "n"); err != nil {
		t.Fatalf("a call behind a slow one: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := c.Rank(short, "n", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call whose ctx ended: %v", err)
	}
	close(f.slow)
	if err := <-slow; err != nil {
		t.Errorf("the slow call: %v", err)
	}

	f2 := newFake()
	f2.slow = make(chan struct{}) // never answered
	c2, _ := pair(t, f2)
	inFlight := make(chan error, 1)
	go func() { _, err := c2.Rank(ctx, "n", 0); inFlight <- err }()
	evErr := make(chan error, 1)
	go func() { evErr <- c2.Events(ctx, func(*Event) {}) }()
	time.Sleep(20 * time.Millisecond)
	c2.conn.Close() // as when the plugin dies
	for _, ch := range []chan error{inFlight, evErr} {
		select {
		case err := <-ch:
			if err == nil || !strings.Contains(err.Error(), "plugin pmix") {
				t.Errorf("after the wire broke: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call or Events hangs after the wire broke")
		}
	}
	close(f2.slow)
}

// helperEnv makes this test binary a plugin (TestMain): the mode says
// which.
const helperEnv = "PMIXBRIDGE_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "serve":
		if err := Serve(newFake()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "old":
		// A plugin of another build: another version in its hello.
		f := os.NewFile(FD, "x")
		f.WriteString(`{"hello":{"name":"gorun-pmix","version":1}}` + "\n")
		time.Sleep(10 * time.Second)
	case "mute":
		time.Sleep(time.Minute)
	case "by-hand":
		os.Unsetenv(CookieKey)
		if err := Serve(newFake()); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(0)
}

// alive says whether process pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := procfs.Proc.Stat(pid)
	return err == nil && st.State != 'Z'
}

// Start runs a real plugin process: it answers, and Close kills it. A
// process that is not the plugin, one of another version and one that says
// nothing are refused, each saying why, and none is left running.
func TestStart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	t.Setenv(helperEnv, "serve")
	// Under -race a process sleeps 1 s at exit (the race runtime's
	// atexit_sleep_ms), past the refusals' timeout below.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	c, err := Start(exe, []string{"TMPDIR=/nowhere"}, &log, 10*time.Second)
	if err != nil {
		t.Fatalf("Start: %v (%s)", err, log.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rep, err := c.Start(ctx, &StartRequest{Nspace: "n"}); err != nil || len(rep.Env[2]) != 2 {
		t.Errorf("Start call: %+v, %v", rep, err)
	}
	pid := c.cmd.Process.Pid
	c.Close()
	if alive(pid) {
		t.Errorf("plugin %d runs after Close", pid)
	}

	for _, tc := range []struct {
		mode, want string
	}{
		{"old", "speaks version 1 of the bridge"},
		{"mute", "no hello within"},
		{"by-hand", "closed the bridge"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Setenv(helperEnv, tc.mode)
			log.Reset()
			start := time.Now()
			c, err := Start(exe, nil, &log, 500*time.Millisecond)
			if err == nil {
				c.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), exe) {
				t.Errorf("error %q, want it to say %q and name %s (log %q)", err, tc.want, exe, log.String())
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("refused after %v", d)
			}
			if tc.mode == "by-hand" && !strings.Contains(log.String(), "not meant to be run by hand") {
				t.Errorf("a plugin run without the cookie said %q", log.String())
			}
		})
	}
	if err := Serve(newFake()); err == nil || !strings.Contains(err.Error(), "not meant to be run by hand") {
		t.Errorf("Serve without the cookie: %v", err)
	}
}
