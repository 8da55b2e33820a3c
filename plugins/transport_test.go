package plugins_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/transporttest"
)

// testBin is the test plugin, built once by TestMain.
var testBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plugins-test")
	if err != nil {
		panic(err)
	}
	testBin = filepath.Join(dir, plugins.BinaryPrefix+"testplugin")
	out, err := exec.Command("go", "build", "-o", testBin, "github.com/gorun/gorun/plugins/internal/testplugin").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		panic("building the test plugin: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func openTest(t testing.TB, env ...string) *plugins.Transport {
	t.Helper()
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		os.Setenv(k, v)
	}
	tr, err := plugins.OpenTransport(plugins.Options{Path: testBin, Rank: -1, Size: -1, LocalRank: -1, Log: os.Stderr})
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		os.Unsetenv(k)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The plugin transport passes the contract every gorun transport passes.
func TestContract(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return openTest(t) })
}

// A message crosses two plugin processes, small and large, from Go memory
// and from a shared region.
func TestExchange(t *testing.T) {
	a, b := openTest(t), openTest(t)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := b.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := a.Connect(ctx, l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := transport.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, size := range []int{0, 1, 100, 8192, 8193, 1 << 20, 4 << 20} {
		for _, shared := range []bool{false, true} {
			src := make([]byte, size)
			for i := range src {
				src[i] = byte(i*7 + size)
			}
			dst := make([]byte, size)
			if shared {
				copy(reg.Bytes(), src)
				src = reg.Bytes()[:size]
			}
			rr, err := rc.Irecv(dst, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := sc.Isend(src, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sr.Wait(ctx); err != nil {
				t.Fatalf("send %d: %v", size, err)
			}
			if n, err := rr.Wait(ctx); err != nil || n != size || !bytes.Equal(dst, src) {
				t.Fatalf("receive %d (shared %v): %d, %v", size, shared, n, err)
			}
		}
	}
}

// A plugin that exits under a transfer fails the transfer, and every later
// call, with transport.ErrTransportLost naming the plugin and its last log
// lines.
func TestPluginCrash(t *testing.T) {
	a := openTest(t, "TESTPLUGIN_CRASH_AFTER=2")
	b := openTest(t)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, _ := b.Listen(ctx)
	sc, err := a.Connect(ctx, l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The crash comes after the second message; a receive posted on the
	// crashed side's own connection must fail.
	l2, _ := a.Listen(ctx)
	back, err := b.Connect(ctx, l2.Handle())
	if err != nil {
		t.Fatal(err)
	}
	in, err := l2.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := in.Irecv(make([]byte, 10), 9, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r, err := sc.Isend([]byte("hello"), 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Wait(ctx)
		rr, _ := rc.Irecv(make([]byte, 5), 1, nil)
		if _, err := rr.Wait(ctx); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	start := time.Now()
	_, err = pending.Wait(ctx)
	if !errors.Is(err, transport.ErrTransportLost) || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("pending receive on the crashed plugin: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the crash took %v to be noticed", time.Since(start))
	}
	for _, want := range []string{"testplugin", "exited", "crashing as asked"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := in.Irecv(make([]byte, 1), 1, nil); !errors.Is(err, transport.ErrTransportLost) {
		t.Errorf("a receive after the crash: %v", err)
	}
	_ = back
}

// A plugin whose transport refuses to start, or that panics before the
// handshake, is an error that names it and says why.
func TestPluginStartFailures(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"TESTPLUGIN_INIT_FAIL=no fabric here", "no fabric here"},
		{"TESTPLUGIN_PANIC=1", "asked to panic"},
	} {
		k, v, _ := strings.Cut(tc.env, "=")
		t.Setenv(k, v)
		_, err := plugins.OpenTransport(plugins.Options{Path: testBin, Rank: -1, Size: -1, LocalRank: -1, StartTimeout: 10 * time.Second})
		os.Unsetenv(k)
		if err == nil || !strings.Contains(err.Error(), "testplugin") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.env, err)
		}
	}
}
