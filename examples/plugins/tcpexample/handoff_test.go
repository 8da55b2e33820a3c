package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/tcp"
	"github.com/gorun/gorun/transport/transporttest"
)

// pluginBin is this plugin built as gorun runs it, once per test binary.
var pluginBin string

func buildPlugin(t *testing.T) string {
	t.Helper()
	if pluginBin != "" {
		return pluginBin
	}
	dir, err := os.MkdirTemp("", "tcpexample-test")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, plugins.BinaryPrefix+"tcpexample")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	pluginBin = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pluginBin != "" {
		os.RemoveAll(filepath.Dir(pluginBin))
	}
	os.Exit(code)
}

// open starts the plugin for a rank, with or without the hand-off.
func open(t *testing.T, handoff bool) *plugins.Transport {
	t.Helper()
	tr, err := plugins.OpenTransport(plugins.Options{Path: buildPlugin(t), Iface: "lo", Rank: -1, Size: -1, LocalRank: -1, NoHandoff: !handoff})
	if err != nil {
		t.Fatal(err)
	}
	if tr.HandsOff() != handoff {
		t.Fatalf("HandsOff() = %v, want %v", tr.HandsOff(), handoff)
	}
	return tr
}

// The connections handed to the rank pass gorun's transport contract, as
// the built-in TCP transport's, whose limits they take.
func TestHandoffContract(t *testing.T) {
	tr := open(t, true)
	if got, want := tr.Info().EagerLimit, tcp.DefaultEagerLimit; got != want {
		t.Errorf("Info().EagerLimit = %d, want the built-in TCP's %d", got, want)
	}
	tr.Close()
	transporttest.Run(t, func(t *testing.T) transport.Transport { return open(t, true) })
}

// exchange sends msg over sc and returns what rc received, or the error.
func exchange(sc transport.SendConn, rc transport.RecvConn, msg []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make([]byte, len(msg))
	r, err := rc.Irecv(got, 7, nil)
	if err != nil {
		return nil, err
	}
	s, err := sc.Isend(msg, 7, nil)
	if err != nil {
		return nil, err
	}
	n, err := r.Wait(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.Wait(ctx); err != nil {
		return nil, err
	}
	return got[:n], nil
}

// pluginPIDs returns the processes of this plugin that this test started.
func pluginPIDs(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		// The parent is the 4th field, after the command in parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if exe != pluginBin || i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 2 && f[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Once handed off, a connection no longer needs the plugin: killing both
// plugin processes leaves it moving messages, large (striped over the
// streams) and small.
func TestHandoffOutlivesPlugin(t *testing.T) {
	a, b := open(t, true), open(t, true)
	defer a.Close()
	defer b.Close()
	sc, rc := transporttest.Connect(t, a, b)
	pids := pluginPIDs(t)
	if len(pids) != 2 {
		t.Fatalf("found %d plugin processes of this test, want 2: %v", len(pids), pids)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, size := range []int{4 << 10, 8 << 20} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		got, err := exchange(sc, rc, msg)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes after the plugins died: %d bytes back, %v", size, len(got), err)
		}
	}
}

// A side that hands off and one that does not (a rank that set
// GORUN_PLUGIN_HANDOFF=0 against one that did not) fail the connection
// at its first message, with an error, rather than read each other's
// bytes as data or hang.
func TestHandoffMismatch(t *testing.T) {
	for _, tc := range []struct {
		name             string
		sender, receiver bool // which side hands off
		want             error
	}{
		{"sender only", true, false, transport.ErrPeerLost},
		{"receiver only", false, true, transport.ErrProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t, tc.sender), open(t, tc.receiver)
			defer a.Close()
			defer b.Close()
			sc, rc := transporttest.Connect(t, a, b)
			start := time.Now()
			_, err := exchange(sc, rc, bytes.Repeat([]byte{1}, 4096))
			if !errors.Is(err, tc.want) {
				t.Fatalf("exchange = %v, want an error wrapping %v", err, tc.want)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("the mismatch took %v to show", took)
			}
			t.Logf("%v", err)
		})
	}
}
