package jobs

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/testusers"
)

// hold opens n connections to addr and keeps them open until the test
// ends, opening another each time the server closes one (after pause).
// With hello, each sends one byte first (the start of a TLS record), as a
// client under way would; without, they stay silent.
func hold(t *testing.T, addr string, n int, hello bool, pause time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	ready := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for ctx.Err() == nil {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					stop := context.AfterFunc(ctx, func() { c.Close() })
					if hello {
						c.Write([]byte{0x16})
					}
					if first {
						ready <- struct{}{}
						first = false
					}
					var b [512]byte
					for err == nil {
						_, err = c.Read(b[:])
					}
					stop()
					c.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	for range n {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatal("the flood's connections were not opened within 30 s")
		}
	}
}

// callN makes n requests one after the other, each of which must be
// answered.
func callN(t *testing.T, info Info, n int) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		var got map[string]any
		err := Call(ctx, info, Request{Op: "status"}, &got)
		cancel()
		if err != nil || got["op"] != "status" {
			t.Fatalf("request %d under the flood: %v (answer %v)", i, err, got)
		}
		t.Logf("request %d answered in %v", i, time.Since(start).Round(time.Millisecond))
	}
}

// Row 3e of the security review: silent connections, more than the
// socket serves and than it lets wait, reopened as soon as they are
// closed, keep neither the owner's requests out nor the owner's
// connections from presenting the key.
func TestFloodSilent(t *testing.T) {
	dir := t.TempDir()
	publish(t, dir, "flood1", echo)
	info, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	hold(t, info.Addrs[0], maxPending+maxConns, false, 20*time.Millisecond)
	callN(t, info, 5)
}

// Connections that started a handshake and stalled, as many as may
// wait: the owner's request waits until the oldest of them has had its
// chance (pendingGrace), and is then answered.
func TestFloodStalled(t *testing.T) {
	dir := t.TempDir()
	s := publish(t, dir, "flood2", echo)
	info, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	hold(t, info.Addrs[0], maxPending, true, time.Hour)
	for deadline := time.Now().Add(30 * time.Second); ; { // until the server holds them all
		s.pmu.Lock()
		n := len(s.pending)
		s.pmu.Unlock()
		if n == maxPending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d of the %d stalled connections after 30 s", n, maxPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	callN(t, info, 3)
}

// Another user of this machine, who can never hold the job's key, cannot
// hold the job socket either: its connections are closed at once, even
// those that start a handshake, and the owner is answered.
func TestFloodAnotherUser(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	attacker := testusers.Create(t, "gjobsock")
	dir := t.TempDir()
	s := publish(t, dir, "flood3", echo)
	info, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(info.Addrs[0])
	flood, err := os.ReadFile(filepath.Join("testdata", "flood.py"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartReady(t, attacker.Command(python, "-c", string(flood), host, port, "100"), "holding", 30*time.Second)
	callN(t, info, 5)
	if s.refused.Load() == 0 {
		t.Error("no connection of the other user was refused")
	}
}

// A socket that closes every connection before answering (one that is
// flooded past what Call waits for): Call tries again, and then says so,
// not a bare EOF.
func TestCallFlooded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := 0
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			c.Close()
		}
	}()
	info := Info{ID: "f4", Addrs: []string{ln.Addr().String()}, Cert: strings.Repeat("ab", 32), Key: strings.Repeat("00", 32)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = Call(ctx, info, Request{Op: "status"}, nil)
	mu.Lock()
	n := accepted
	mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "flooding") || !strings.Contains(err.Error(), "job f4") || n < 2 {
		t.Fatalf("Call = %v after %d connections, want one that says the socket is full or flooded", err, n)
	}
	t.Log(err)
	// The server's close reads as EOF, or as a reset where the client's
	// hello was still unread.
	if !strings.Contains(err.Error(), "(last: EOF)") && !strings.Contains(err.Error(), "connection reset by peer)") {
		t.Errorf("Call = %v: the last failure is not named", err)
	}
}

// peerUID names the user of a client of this host, on a loopback
// listener and on a dual-stack one, over IPv4 and IPv6.
func TestPeerUID(t *testing.T) {
	for _, tt := range []struct{ listen, dial string }{
		{"127.0.0.1:0", "127.0.0.1"},
		{":0", "127.0.0.1"},
		{":0", "::1"},
	} {
		ln, err := net.Listen("tcp", tt.listen)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		c, err := net.Dial("tcp", net.JoinHostPort(tt.dial, port))
		if err != nil {
			t.Logf("%s: %v", tt.dial, err) // no IPv6 here
			continue
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if uid, ok := peerUID(s); !ok || uid != os.Getuid() {
			t.Errorf("listening on %s, a client of %s: uid %d, %v; want %d", tt.listen, tt.dial, uid, ok, os.Getuid())
		}
	}
}

// More of the owner's requests at once than a head serves: each waits
// for its turn, and every one is answered.
func TestMoreRequestsThanSlots(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	var mu sync.Mutex
	serving, most := 0, 0
	publish(t, dir, "busy1", func(ctx context.Context, r Request) (any, error) {
		mu.Lock()
		serving++
		most = max(most, serving)
		mu.Unlock()
		<-release
		mu.Lock()
		serving--
		mu.Unlock()
		return r.Op, nil
	})
	info, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	const n = maxConns + 8
	errs := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var got string
			errs <- Call(ctx, info, Request{Op: "x"}, &got)
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); ; { // until every slot is taken
		mu.Lock()
		s := serving
		mu.Unlock()
		if s == maxConns || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if most != maxConns {
		t.Errorf("%d requests served at once, want %d", most, maxConns)
	}
}
