package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/plugins/fabric/ofi"
	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/transport"
)

// Environment of the re-executed test binary that plays a killed peer.
const (
	envPeerProvider = "GORUN_FABRIC_TEST_PEER"
	envPeerHandle   = "GORUN_FABRIC_TEST_HANDLE"
)

// TestMain keeps libfabric's tcp provider on loopback (it reads these
// once, at its first call), and runs the peer process of TestKilledPeer
// when re-executed as one.
func TestMain(m *testing.M) {
	os.Setenv("FI_TCP_IFACE", "lo")
	os.Setenv("FI_SOCKETS_IFACE", "lo")
	if prov := os.Getenv(envPeerProvider); prov != "" {
		os.Exit(runPeer(prov, os.Getenv(envPeerHandle)))
	}
	os.Exit(m.Run())
}

// providers are the libfabric providers the tests run on: both come with
// Debian's libfabric1 and need no RDMA hardware.
var providers = []string{"tcp;ofi_rxm", "shm"}

const testTimeout = 30 * time.Second

// need skips the test when prov is not available, or fails it when the
// CI environment variable is set.
func need(tb testing.TB, prov string) {
	tb.Helper()
	infos, err := ofi.Providers(prov)
	if err == nil && len(infos) > 0 {
		return
	}
	msg := fmt.Sprintf("libfabric provider %q is not available (err %v): apt-get install libfabric-dev libfabric-bin", prov, err)
	testenv.Missing(tb, msg)
}

func config(prov string) sdk.Config {
	return sdk.Config{Rank: -1, Size: -1, LocalRank: -1, Iface: "lo", Options: map[string]string{"provider": prov}}
}

// newT makes a transport of provider prov, closed at the end of the test.
func newT(tb testing.TB, prov string) sdk.Transport {
	tb.Helper()
	need(tb, prov)
	tr, err := newTransport(config(prov))
	if err != nil {
		tb.Fatalf("newTransport(%q): %v", prov, err)
	}
	tb.Cleanup(func() {
		if err := tr.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return tr
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// connect opens a connection from a to b.
func connect(tb testing.TB, a, b sdk.Transport) (sdk.SendConn, sdk.RecvConn) {
	tb.Helper()
	ctx := ctxT(tb)
	l, err := b.Listen(ctx)
	if err != nil {
		tb.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	if n := len(l.Handle()); n > transport.MaxHandleSize {
		tb.Fatalf("handle of %d bytes", n)
	}
	type acc struct {
		rc  sdk.RecvConn
		err error
	}
	ch := make(chan acc, 1)
	go func() {
		rc, err := l.Accept(ctx)
		ch <- acc{rc, err}
	}()
	sc, err := a.Connect(ctx, l.Handle())
	if err != nil {
		tb.Fatalf("Connect: %v", err)
	}
	r := <-ch
	if r.err != nil {
		tb.Fatalf("Accept: %v", r.err)
	}
	return sc, r.rc
}

type result struct {
	n   int
	err error
}

// wait tests reqs until all are done.
func wait(tb testing.TB, reqs ...sdk.Request) []result {
	tb.Helper()
	out := make([]result, len(reqs))
	done := make([]bool, len(reqs))
	left := len(reqs)
	deadline := time.Now().Add(testTimeout)
	for left > 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d requests not done after %v", left, len(reqs), testTimeout)
		}
		for i, r := range reqs {
			if done[i] {
				continue
			}
			if ok, n, err := r.Test(); ok {
				done[i], out[i] = true, result{n, err}
				left--
			}
		}
	}
	return out
}

func mustOK(tb testing.TB, what string, rs []result, ns ...int) {
	tb.Helper()
	for i, r := range rs {
		if r.err != nil {
			tb.Fatalf("%s: request %d: %v", what, i, r.err)
		}
		if i < len(ns) && r.n != ns[i] {
			tb.Fatalf("%s: request %d: n = %d, want %d", what, i, r.n, ns[i])
		}
	}
}

func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*13+seed) ^ byte(i>>11)
	}
}

func checkData(tb testing.TB, what string, got, want []byte) {
	tb.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		tb.Fatalf("%s: data differs at byte %d of %d", what, i, len(want))
	}
}

// alloc returns n bytes of memfd-backed memory and its registration with
// tr.
func alloc(tb testing.TB, tr sdk.Transport, n int) ([]byte, sdk.Registration) {
	tb.Helper()
	r, err := transport.Alloc(n)
	if err != nil {
		tb.Fatalf("transport.Alloc(%d): %v", n, err)
	}
	reg, err := tr.Register(r.Bytes())
	if err != nil {
		tb.Fatalf("Register: %v", err)
	}
	tb.Cleanup(func() {
		if err := tr.Deregister(reg); err != nil {
			tb.Errorf("Deregister: %v", err)
		}
		r.Close()
	})
	return r.Bytes(), reg
}

func TestHandle(t *testing.T) {
	h := handle{provider: "tcp;ofi_rxm", listener: 7, instance: 0xdeadbeef12345, name: []byte{1, 2, 3, 4}}
	b := h.encode()
	g, err := decodeHandle(b)
	if err != nil {
		t.Fatalf("decodeHandle: %v", err)
	}
	if g.listener != 7 || g.instance != h.instance || !bytes.Equal(g.name, h.name) || g.provHash != provHash(h.provider) {
		t.Fatalf("round trip: %+v from %+v", g, h)
	}
	bad := [][]byte{nil, {}, []byte("hello, world, this is not a handle"), b[:len(b)-1], append(append([]byte(nil), b...), 0)}
	v := append([]byte(nil), b...)
	v[2] = 9
	bad = append(bad, v)
	for _, x := range bad {
		if _, err := decodeHandle(x); !errors.Is(err, sdk.ErrBadHandle) {
			t.Errorf("decodeHandle(%x): %v, want ErrBadHandle", x, err)
		}
	}
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			tr := newT(t, prov)
			ctx := ctxT(t)
			l, err := tr.Listen(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if len(l.Handle()) > transport.MaxHandleSize {
				t.Fatalf("handle of %d bytes", len(l.Handle()))
			}
			if _, err := decodeHandle(l.Handle()); err != nil {
				t.Fatalf("own handle: %v", err)
			}
			for _, x := range bad {
				if _, err := tr.Connect(ctx, x); !errors.Is(err, sdk.ErrBadHandle) {
					t.Errorf("Connect(%x): %v, want ErrBadHandle", x, err)
				}
			}
			// A handle of the other provider.
			other := handle{provider: "other", listener: 1, instance: 1, name: []byte("x")}.encode()
			if _, err := tr.Connect(ctx, other); !errors.Is(err, sdk.ErrBadHandle) {
				t.Errorf("Connect(handle of another provider): %v, want ErrBadHandle", err)
			}
		})
	}
}

var sizes = []int{0, 1, 4093, 64 << 10, 1<<20 + 13, 16 << 20}

// TestSizes sends messages of every size, from Go memory and from
// registered (zero-copy) memory, each way.
func TestSizes(t *testing.T) {
	for _, prov := range providers {
		for _, mode := range []string{"go", "registered", "go-to-registered", "registered-to-go"} {
			t.Run(prov+"/"+mode, func(t *testing.T) {
				a, b := newT(t, prov), newT(t, prov)
				sc, rc := connect(t, a, b)
				max := sizes[len(sizes)-1]
				sbuf, rbuf := make([]byte, max), make([]byte, max)
				var sreg, rreg sdk.Registration
				if mode == "registered" || mode == "registered-to-go" {
					sbuf, sreg = alloc(t, a, max)
					if !sreg.(*registration).external {
						t.Fatal("memfd memory not registered for zero copy")
					}
				}
				if mode == "registered" || mode == "go-to-registered" {
					rbuf, rreg = alloc(t, b, max)
				}
				for i, n := range sizes {
					pattern(sbuf[:n], i)
					rr, err := rc.Recv(rbuf[:max], rreg)
					if err != nil {
						t.Fatalf("Recv: %v", err)
					}
					sr, err := sc.Send(sbuf[:n], sreg)
					if err != nil {
						t.Fatalf("Send: %v", err)
					}
					mustOK(t, fmt.Sprintf("size %d", n), wait(t, sr, rr), n, n)
					checkData(t, fmt.Sprintf("size %d", n), rbuf[:n], sbuf[:n])
				}
			})
		}
	}
}

// TestSelf connects a transport to its own listener.
func TestSelf(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			a := newT(t, prov)
			sc, rc := connect(t, a, a)
			for _, n := range []int{5, 100000} {
				sbuf, rbuf := make([]byte, n), make([]byte, n)
				pattern(sbuf, n)
				rr, err := rc.Recv(rbuf, nil)
				if err != nil {
					t.Fatal(err)
				}
				sr, err := sc.Send(sbuf, nil)
				if err != nil {
					t.Fatal(err)
				}
				mustOK(t, "self", wait(t, sr, rr), n, n)
				checkData(t, "self", rbuf, sbuf)
			}
		})
	}
}

// TestOrder posts many sends at once, on two connections between the same
// transports, and receives them one at a time, as the SDK does.
func TestOrder(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			a, b := newT(t, prov), newT(t, prov)
			sc1, rc1 := connect(t, a, b)
			sc2, rc2 := connect(t, a, b)
			const count = 500
			size := func(i int) int { return []int{0, 8, 3000, 20000, 70000}[i%5] }
			var sends []sdk.Request
			bufs := make([][]byte, count)
			for i := 0; i < count; i++ {
				bufs[i] = make([]byte, size(i))
				pattern(bufs[i], i)
				sc := sc1
				if i%3 == 0 {
					sc = sc2
				}
				r, err := sc.Send(bufs[i], nil)
				if err != nil {
					t.Fatalf("Send %d: %v", i, err)
				}
				sends = append(sends, r)
			}
			rbuf := make([]byte, 70000)
			for _, c := range []struct {
				rc   sdk.RecvConn
				want func(i int) bool
			}{{rc1, func(i int) bool { return i%3 != 0 }}, {rc2, func(i int) bool { return i%3 == 0 }}} {
				for i := 0; i < count; i++ {
					if !c.want(i) {
						continue
					}
					r, err := c.rc.Recv(rbuf, nil)
					if err != nil {
						t.Fatalf("Recv %d: %v", i, err)
					}
					res := wait(t, r)[0]
					if res.err != nil || res.n != size(i) {
						t.Fatalf("message %d: n %d (want %d), %v", i, res.n, size(i), res.err)
					}
					checkData(t, fmt.Sprintf("message %d", i), rbuf[:res.n], bufs[i])
				}
			}
			mustOK(t, "sends", wait(t, sends...))
		})
	}
}

// TestBidirectional runs an exchange both ways at once, each transport
// driven by its own goroutine.
func TestBidirectional(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			a, b := newT(t, prov), newT(t, prov)
			scAB, rcAB := connect(t, a, b)
			scBA, rcBA := connect(t, b, a)
			const rounds = 200
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			side := func(sc sdk.SendConn, rc sdk.RecvConn, seed int, reg bool, tr sdk.Transport) {
				defer wg.Done()
				sbuf, rbuf := make([]byte, 1<<18), make([]byte, 1<<18)
				var sreg, rreg sdk.Registration
				if reg {
					sbuf, sreg = alloc(t, tr, 1<<18)
					rbuf, rreg = alloc(t, tr, 1<<18)
				}
				want := make([]byte, 1<<18)
				for i := 0; i < rounds; i++ {
					n := (i * 977) % (1 << 18)
					pattern(sbuf[:n], seed+i)
					rr, err := rc.Recv(rbuf, rreg)
					if err != nil {
						errs <- err
						return
					}
					sr, err := sc.Send(sbuf[:n], sreg)
					if err != nil {
						errs <- err
						return
					}
					var rs, ss bool
					deadline := time.Now().Add(testTimeout)
					for !rs || !ss {
						if time.Now().After(deadline) {
							errs <- fmt.Errorf("round %d: timeout", i)
							return
						}
						if !rs {
							ok, m, err := rr.Test()
							if ok {
								if err != nil || m != n {
									errs <- fmt.Errorf("round %d: recv n %d want %d: %v", i, m, n, err)
									return
								}
								pattern(want[:n], (seed^1)+i)
								if !bytes.Equal(rbuf[:n], want[:n]) {
									errs <- fmt.Errorf("round %d: data differs", i)
									return
								}
								rs = true
							}
						}
						if !ss {
							ok, _, err := sr.Test()
							if ok && err != nil {
								errs <- fmt.Errorf("round %d: send: %v", i, err)
								return
							}
							ss = ok
						}
					}
				}
			}
			wg.Add(2)
			go side(scAB, rcBA, 0, false, a)
			go side(scBA, rcAB, 1, true, b)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// failsWith waits until r is done and checks it failed with target within d.
func failsWith(t *testing.T, what string, r sdk.Request, target error, d time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		ok, _, err := r.Test()
		if ok {
			if !errors.Is(err, target) {
				t.Fatalf("%s: %v, want %v", what, err, target)
			}
			if el := time.Since(start); el > d {
				t.Fatalf("%s: took %v, want at most %v", what, el, d)
			}
			return
		}
		if time.Since(start) > d+testTimeout {
			t.Fatalf("%s: not done after %v", what, time.Since(start))
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestClose(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov+"/sender-closes", func(t *testing.T) {
			a, b := newT(t, prov), newT(t, prov)
			sc, rc := connect(t, a, b)
			// A message sent before the close still arrives.
			sr, err := sc.Send([]byte("last words"), nil)
			if err != nil {
				t.Fatal(err)
			}
			mustOK(t, "send", wait(t, sr))
			if err := sc.Close(); err != nil {
				t.Fatal(err)
			}
			if err := sc.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := sc.Send([]byte("x"), nil); !errors.Is(err, sdk.ErrClosed) {
				t.Fatalf("Send after Close: %v, want ErrClosed", err)
			}
			buf := make([]byte, 100)
			r, err := rc.Recv(buf, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustOK(t, "recv before close", wait(t, r), 10)
			r, err = rc.Recv(buf, nil)
			if err == nil {
				failsWith(t, "Recv after the peer closed", r, sdk.ErrPeerLost, 5*time.Second)
			} else if !errors.Is(err, sdk.ErrPeerLost) {
				t.Fatalf("Recv after the peer closed: %v", err)
			}
		})
		t.Run(prov+"/receiver-closes", func(t *testing.T) {
			a, b := newT(t, prov), newT(t, prov)
			sc, rc := connect(t, a, b)
			buf := make([]byte, 100)
			r, err := rc.Recv(buf, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Close(); err != nil {
				t.Fatal(err)
			}
			failsWith(t, "pending Recv after Close", r, sdk.ErrClosed, time.Second)
			if _, err := rc.Recv(buf, nil); !errors.Is(err, sdk.ErrClosed) {
				t.Fatalf("Recv after Close: %v, want ErrClosed", err)
			}
			// The sender learns it: a large send (rendezvous) that
			// nobody will receive fails.
			deadline := time.Now().Add(5 * time.Second)
			for {
				sr, err := sc.Send(make([]byte, 1<<20), nil)
				if err != nil {
					if !errors.Is(err, sdk.ErrPeerLost) {
						t.Fatalf("Send after the peer closed: %v", err)
					}
					break
				}
				res := wait(t, sr)[0]
				if res.err != nil {
					if !errors.Is(res.err, sdk.ErrPeerLost) {
						t.Fatalf("Send after the peer closed: %v", res.err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("sends still succeed 5 s after the receiver closed")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		t.Run(prov+"/transport-closes", func(t *testing.T) {
			a, b := newT(t, prov), newT(t, prov)
			sc, rc := connect(t, a, b)
			scBA, rcBA := connect(t, b, a)
			_ = scBA
			rbuf := make([]byte, 4<<20)
			mine, err := rcBA.Recv(rbuf, nil) // a's own pending receive
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := rc.Recv(make([]byte, 100), nil) // b's pending receive from a
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			failsWith(t, "own pending Recv after Close", mine, sdk.ErrClosed, time.Second)
			if _, err := sc.Send([]byte("x"), nil); !errors.Is(err, sdk.ErrClosed) {
				t.Fatalf("Send after transport Close: %v, want ErrClosed", err)
			}
			if _, err := a.Listen(ctxT(t)); !errors.Is(err, sdk.ErrClosed) {
				t.Fatalf("Listen after Close: %v, want ErrClosed", err)
			}
			failsWith(t, "peer's pending Recv", theirs, sdk.ErrPeerLost, 5*time.Second)
		})
	}
}

func TestListenerClose(t *testing.T) {
	prov := "tcp;ofi_rxm"
	a, b := newT(t, prov), newT(t, prov)
	ctx := ctxT(t)
	l, err := b.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := l.Handle()
	l.Close()
	if _, err := l.Accept(ctx); !errors.Is(err, sdk.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want ErrClosed", err)
	}
	if _, err := a.Connect(ctx, h); err == nil {
		t.Fatal("Connect to a closed listener succeeded")
	}
}

// TestKilledPeer kills the peer process (SIGKILL) while a receive from it
// is pending: the receive must fail with ErrPeerLost within 5 s.
func TestKilledPeer(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			tr := newT(t, prov)
			ctx := ctxT(t)
			l, err := tr.Listen(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envPeerProvider+"="+prov, envPeerHandle+"="+hex.EncodeToString(l.Handle()))
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Kill()
				cmd.Wait()
			}()
			rc, err := l.Accept(ctx)
			if err != nil {
				t.Fatalf("Accept: %v", err)
			}
			buf := make([]byte, 64)
			r, err := rc.Recv(buf, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustOK(t, "first message", wait(t, r), 5)
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
				t.Fatalf("peer: %q, %v", line, err)
			}
			r, err = rc.Recv(buf, nil)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			failsWith(t, "Recv from a killed peer", r, sdk.ErrPeerLost, 5*time.Second)
		})
	}
}

// runPeer is the peer process of TestKilledPeer: it connects to the
// handle, sends one message, says "ready" and waits to be killed.
func runPeer(prov, hexHandle string) int {
	h, err := hex.DecodeString(hexHandle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 2
	}
	tr, err := newTransport(config(prov))
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sc, err := tr.Connect(ctx, h)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 2
	}
	r, err := sc.Send([]byte("hello"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 2
	}
	for {
		ok, _, err := r.Test()
		if ok {
			if err != nil {
				fmt.Fprintln(os.Stderr, "peer:", err)
				return 2
			}
			break
		}
	}
	fmt.Println("ready")
	time.Sleep(time.Minute)
	return 0
}

func TestDevices(t *testing.T) {
	tr := newT(t, "tcp;ofi_rxm")
	devs, err := tr.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sel := 0
	for _, d := range devs {
		if d.Note == "selected" {
			sel++
			if d.Provider != "tcp;ofi_rxm" || d.Name != "lo" {
				t.Errorf("selected %+v, want tcp;ofi_rxm on lo", d)
			}
		}
		if d.Name == "lo" && (d.PCI != "" || d.NUMA != -1) {
			t.Errorf("lo has PCI %q, NUMA %d", d.PCI, d.NUMA)
		}
	}
	if sel != 1 {
		t.Errorf("%d devices selected in %+v", sel, devs)
	}
}

func TestChoose(t *testing.T) {
	infos := []ofi.Info{
		{Provider: "net", Domain: "eth0"},
		{Provider: "tcp;ofi_rxm", Domain: "eth0"},
		{Provider: "tcp;ofi_rxm", Domain: "lo"},
		{Provider: "shm", Domain: "shm"},
		{Provider: "verbs;ofi_rxm", Domain: "mlx5_0"},
		{Provider: "verbs;ofi_rxm", Domain: "mlx5_1"},
	}
	t.Setenv(envProvider, "")
	t.Setenv("NCCL_IB_HCA", "")
	t.Setenv("UCX_NET_DEVICES", "")
	t.Setenv("NCCL_SOCKET_IFNAME", "")
	for _, tc := range []struct {
		opt, env, iface, hca string
		prov, dom            string
		fail                 bool
	}{
		{prov: "verbs;ofi_rxm", dom: "mlx5_0"},
		{hca: "=mlx5_1:1", prov: "verbs;ofi_rxm", dom: "mlx5_1"},
		{opt: "tcp;ofi_rxm", iface: "=lo,eth0", prov: "tcp;ofi_rxm", dom: "lo"},
		{env: "shm", prov: "shm", dom: "shm"},
		{opt: "shm", env: "tcp;ofi_rxm", prov: "shm", dom: "shm"},
		{opt: "efa", fail: true},
	} {
		t.Setenv(envProvider, tc.env)
		t.Setenv("NCCL_IB_HCA", tc.hca)
		cfg := sdk.Config{Iface: tc.iface, Options: map[string]string{}}
		if tc.opt != "" {
			cfg.Options["provider"] = tc.opt
		}
		c, err := choose(cfg, infos)
		if tc.fail {
			if err == nil {
				t.Errorf("%+v: chose %+v, want an error", tc, c)
			}
			continue
		}
		if err != nil || c.provider != tc.prov || c.domain != tc.dom {
			t.Errorf("%+v: chose %+v, %v; want %s on %s", tc, c, err, tc.prov, tc.dom)
		}
	}
	if got := firstIface("=eth1, eth2"); got != "eth1" {
		t.Errorf("firstIface: %q", got)
	}
}

func TestNameLabel(t *testing.T) {
	tr := newT(t, "tcp;ofi_rxm")
	a := newT(t, "tcp;ofi_rxm")
	sc, rc := connect(t, a, tr)
	if !strings.HasPrefix(sc.Peer(), "127.0.0.1:") || !strings.HasPrefix(rc.Peer(), "127.0.0.1:") {
		t.Errorf("peers %q, %q; want 127.0.0.1:port", sc.Peer(), rc.Peer())
	}
}
