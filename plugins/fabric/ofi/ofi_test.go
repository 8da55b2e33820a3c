//go:build cgo && linux

package ofi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// TestMain keeps the tcp provider on loopback: libfabric reads these
// variables once, at its first call.
func TestMain(m *testing.M) {
	os.Setenv("FI_TCP_IFACE", "lo")
	os.Setenv("FI_SOCKETS_IFACE", "lo")
	os.Exit(m.Run())
}

// providers are the providers the tests run on; both ship with Debian's
// libfabric1 and need no RDMA hardware.
var providers = []struct{ name, prov string }{
	{"tcp", "tcp;ofi_rxm"},
	{"shm", "shm"},
}

// testTimeout bounds every wait of the tests.
const testTimeout = 20 * time.Second

// need skips (or, in CI, fails) when prov is not usable here.
func need(tb testing.TB, prov string) {
	tb.Helper()
	infos, err := Providers(prov)
	if err == nil && len(infos) > 0 {
		return
	}
	msg := fmt.Sprintf("libfabric provider %q is not available (err %v, %d found): apt-get install libfabric-dev libfabric-bin", prov, err, len(infos))
	testenv.Missing(tb, msg)
}

// pair is two endpoints of one provider that know each other.
type pair struct {
	a, b   *Endpoint
	ab, ba Addr // b's address in a's AV, a's address in b's AV
}

func open(tb testing.TB, prov string) *Endpoint {
	tb.Helper()
	e, err := Open(prov)
	if err != nil {
		tb.Fatalf("Open(%q): %v", prov, err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	if strings.HasPrefix(prov, "tcp") {
		checkLoopbackName(tb, e)
	}
	return e
}

func openPair(tb testing.TB, prov string) *pair {
	tb.Helper()
	need(tb, prov)
	p := &pair{a: open(tb, prov), b: open(tb, prov)}
	p.ab = insert(tb, p.a, p.b)
	p.ba = insert(tb, p.b, p.a)
	return p
}

// insert makes peer known to e.
func insert(tb testing.TB, e, peer *Endpoint) Addr {
	tb.Helper()
	name, err := peer.Name()
	if err != nil {
		tb.Fatalf("Name: %v", err)
	}
	a, err := e.Insert(name)
	if err != nil {
		tb.Fatalf("Insert(%q): %v", name, err)
	}
	return a
}

// checkLoopbackName fails unless a tcp endpoint's name is a sockaddr_in
// of 127.0.0.1.
func checkLoopbackName(tb testing.TB, e *Endpoint) {
	tb.Helper()
	name, err := e.Name()
	if err != nil {
		tb.Fatalf("Name: %v", err)
	}
	if len(name) < 8 || binary.NativeEndian.Uint16(name) != syscall.AF_INET {
		tb.Fatalf("tcp endpoint name %x is not a sockaddr_in (want 127.0.0.1; is FI_TCP_IFACE=lo honoured?)", name)
	}
	ip, port := net.IP(name[4:8]), binary.BigEndian.Uint16(name[2:4])
	if !ip.Equal(net.IPv4(127, 0, 0, 1)) || port == 0 {
		tb.Fatalf("tcp endpoint name is %v:%d, want 127.0.0.1:port (FI_TCP_IFACE=lo not honoured?)", ip, port)
	}
}

// result is one Request's outcome.
type result struct {
	n   int
	err error
}

// wait progresses the endpoints until all reqs are done; the peer of a
// transfer needs progress too (manual data progress).
func (p *pair) wait(tb testing.TB, reqs ...*Request) []result {
	tb.Helper()
	out := make([]result, len(reqs))
	done := make([]bool, len(reqs))
	left := len(reqs)
	deadline := time.Now().Add(testTimeout)
	for left > 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d requests not done after %v (done: %v)", left, len(reqs), testTimeout, done)
		}
		for _, e := range []*Endpoint{p.a, p.b} {
			if _, err := e.Progress(); err != nil {
				tb.Fatalf("Progress: %v", err)
			}
		}
		for i, r := range reqs {
			if done[i] {
				continue
			}
			ok, n, err := r.Test()
			if ok {
				done[i], out[i] = true, result{n, err}
				left--
			} else if err != nil {
				tb.Fatalf("Test: %v", err)
			}
		}
		runtime.Gosched()
	}
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed + byte(i>>12)
	}
	return b
}

func checkData(tb testing.TB, what string, got, want []byte) {
	tb.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		tb.Fatalf("%s: data differs at byte %d of %d (len got %d)", what, i, len(want), len(got))
	}
}

func TestProviders(t *testing.T) {
	all, err := Providers("")
	if err != nil {
		t.Fatalf("Providers(\"\"): %v", err)
	}
	t.Logf("all providers: %+v", all)
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			need(t, pv.prov)
			infos, err := Providers(pv.prov)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				if in.Provider != pv.prov || in.Fabric == "" || in.Domain == "" {
					t.Errorf("Providers(%q) gave %+v", pv.prov, in)
				}
			}
			e := open(t, pv.prov)
			t.Logf("opened %+v", e.Info())
			if e.Info().Provider != pv.prov {
				t.Errorf("Info().Provider = %q, want %q", e.Info().Provider, pv.prov)
			}
		})
	}
	infos, err := Providers("no-such-provider")
	if err != nil || len(infos) != 0 {
		t.Errorf("Providers(no-such-provider) = %v, %v; want none, nil", infos, err)
	}
	_, err = Open("no-such-provider")
	var fe *Error
	if !errors.As(err, &fe) || fe.Op != "fi_getinfo" || !strings.Contains(err.Error(), `"no-such-provider"`) {
		t.Errorf("Open(no-such-provider) error = %v, want a fi_getinfo *Error naming the provider", err)
	}
}

func TestErrorType(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Op: "fi_cq_readerr", Code: fiETRUNC, Msg: "Truncation error"})
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("FI_ETRUNC error does not match ErrTruncated")
	}
	err = &Error{Op: "fi_tsend", Code: int(syscall.ECONNREFUSED), Msg: "Connection refused"}
	if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrTruncated) {
		t.Errorf("errno error does not unwrap to its errno")
	}
	if got := err.Error(); got != "fi_tsend: Connection refused (111)" {
		t.Errorf("Error() = %q", got)
	}
}

// TestLoopbackOnly checks that the tcp provider's name and all of the
// process's TCP sockets are on 127.0.0.1 after traffic.
//
// It also drives both endpoints from one goroutine: the first Send to a new
// peer cannot be posted until the peer accepts the connection, so Send must
// queue it rather than block.
func TestLoopbackOnly(t *testing.T) {
	p := openPair(t, "tcp;ofi_rxm")
	msg := pattern(100, 1)
	rr, _ := p.b.Recv(p.ba, 1, make([]byte, 100), nil)
	sr, err := p.a.Send(p.ab, 1, msg, nil)
	if err != nil || rr == nil {
		t.Fatalf("Send/Recv: %v", err)
	}
	p.wait(t, sr, rr)
	inodes := socketInodes(t)
	if len(inodes) == 0 {
		t.Fatal("no sockets found for the tcp endpoints")
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !inodes[fs[9]] {
				continue
			}
			local := strings.Split(fs[1], ":")[0]
			// 0100007F is 127.0.0.1 in /proc's host-order hex; the
			// IPv6 form of it is ::ffff:127.0.0.1.
			if local != "0100007F" && local != "0000000000000000FFFF00000100007F" {
				t.Errorf("%s: socket inode %s bound to %s, not 127.0.0.1", f, fs[9], fs[1])
			}
		}
		fh.Close()
	}
}

func socketInodes(t *testing.T) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, de := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", de.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out
}

var sizes = []int{0, 1, 4095, 65537, 4 << 20}

// TestExchange sends messages of each size both ways; a→b posts the
// receive first (expected message), b→a sends first (unexpected message).
func TestExchange(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			p := openPair(t, pv.prov)
			for i, n := range sizes {
				t.Run(strconv.Itoa(n), func(t *testing.T) {
					tag := uint64(1000 + i)
					// a → b, receive posted first.
					want := pattern(n, byte(i))
					got := make([]byte, n)
					rr, err := p.b.Recv(p.ba, tag, got, nil)
					if err != nil {
						t.Fatalf("Recv: %v", err)
					}
					sr, err := p.a.Send(p.ab, tag, want, nil)
					if err != nil {
						t.Fatalf("Send: %v", err)
					}
					res := p.wait(t, sr, rr)
					if res[0].err != nil || res[0].n != n || res[1].err != nil || res[1].n != n {
						t.Fatalf("a→b: send %+v, recv %+v; want n=%d", res[0], res[1], n)
					}
					checkData(t, "a→b", got, want)

					// b → a, send first.
					want = pattern(n, byte(i+100))
					got = make([]byte, n)
					sr, err = p.b.Send(p.ba, tag, want, nil)
					if err != nil {
						t.Fatalf("Send: %v", err)
					}
					clear(want[:min(n, 10)]) // Send copied it: reuse is allowed
					copy(want, pattern(min(n, 10), byte(i+100)))
					for k := 0; k < 10; k++ {
						p.a.Progress()
						p.b.Progress()
					}
					rr, err = p.a.Recv(p.ab, tag, got, nil)
					if err != nil {
						t.Fatalf("Recv: %v", err)
					}
					res = p.wait(t, sr, rr)
					if res[0].err != nil || res[0].n != n || res[1].err != nil || res[1].n != n {
						t.Fatalf("b→a: send %+v, recv %+v; want n=%d", res[0], res[1], n)
					}
					checkData(t, "b→a", got, want)
				})
			}
		})
	}
}

// TestTagMatching posts receives for tags 2 then 1, sends 1 then 2, and
// checks that each message lands in its tag's buffer.
func TestTagMatching(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			p := openPair(t, pv.prov)
			one, two := pattern(300, 1), pattern(700, 2)
			b1, b2 := make([]byte, 1000), make([]byte, 1000)
			r2, err := p.b.Recv(p.ba, 2, b2, nil)
			if err != nil {
				t.Fatal(err)
			}
			r1, err := p.b.Recv(AddrUnspec, 1, b1, nil)
			if err != nil {
				t.Fatal(err)
			}
			s1, err := p.a.Send(p.ab, 1, one, nil)
			if err != nil {
				t.Fatal(err)
			}
			s2, err := p.a.Send(p.ab, 2, two, nil)
			if err != nil {
				t.Fatal(err)
			}
			res := p.wait(t, s1, s2, r1, r2)
			for i, r := range res {
				if r.err != nil {
					t.Fatalf("request %d: %v", i, r.err)
				}
			}
			if res[2].n != len(one) || res[3].n != len(two) {
				t.Fatalf("tag 1 got %d bytes (want %d), tag 2 got %d (want %d)", res[2].n, len(one), res[3].n, len(two))
			}
			checkData(t, "tag 1", b1[:res[2].n], one)
			checkData(t, "tag 2", b2[:res[3].n], two)
		})
	}
}

// TestDirectedRecv checks that a receive from one peer does not take a
// message with the same tag from another, where the provider supports it.
func TestDirectedRecv(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			p := openPair(t, pv.prov)
			if !p.b.Info().DirectedRecv {
				t.Skipf("%s has no FI_DIRECTED_RECV", pv.prov)
			}
			c := open(t, pv.prov)
			cb := insert(t, c, p.b)
			bc := insert(t, p.b, c)
			fromA, fromC := make([]byte, 10), make([]byte, 10)
			rc, err := p.b.Recv(bc, 7, fromC, nil)
			if err != nil {
				t.Fatal(err)
			}
			ra, err := p.b.Recv(p.ba, 7, fromA, nil)
			if err != nil {
				t.Fatal(err)
			}
			sa, err := p.a.Send(p.ab, 7, []byte("from a"), nil)
			if err != nil {
				t.Fatal(err)
			}
			p.wait(t, sa, ra)
			if done, _, _ := rc.Test(); done {
				t.Fatal("receive directed at c completed with a's message")
			}
			sc, err := c.Send(cb, 7, []byte("from c"), nil)
			if err != nil {
				t.Fatal(err)
			}
			pc := &pair{a: c, b: p.b}
			res := pc.wait(t, sc, rc)
			if string(fromA[:6]) != "from a" || string(fromC[:res[1].n]) != "from c" {
				t.Fatalf("got %q from a, %q from c", fromA, fromC)
			}
		})
	}
}

// TestTruncation receives messages longer than the buffer, eager and
// large, each on a fresh pair, and checks that the endpoint stays usable,
// except where libfabric 1.17 is known not to be.
func TestTruncation(t *testing.T) {
	for _, pv := range providers {
		for _, n := range []int{100, 4000, 20000, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", pv.name, n), func(t *testing.T) {
				if pv.prov == "shm" && n > 4096 {
					// libfabric 1.17's shm provider never returns from
					// fi_cq_read once a message above its inject size
					// (4 KiB; SAR or CMA protocols) is truncated: it
					// spins inside the provider (reproduced in plain C).
					// Users of shm must not let receives truncate.
					t.Skipf("shm in libfabric 1.17 hangs in fi_cq_read on truncating a %d-byte message", n)
				}
				p := openPair(t, pv.prov)
				rr, err := p.b.Recv(p.ba, 5, make([]byte, 10), nil)
				if err != nil {
					t.Fatal(err)
				}
				sr, err := p.a.Send(p.ab, 5, pattern(n, 3), nil)
				if err != nil {
					t.Fatal(err)
				}
				res := p.wait(t, sr, rr)
				if res[0].err != nil {
					t.Errorf("send: %v", res[0].err)
				}
				if !errors.Is(res[1].err, ErrTruncated) {
					t.Fatalf("%d bytes into 10: recv %d %v, want ErrTruncated", n, res[1].n, res[1].err)
				}
				var fe *Error
				if !errors.As(res[1].err, &fe) || fe.Op != "fi_cq_readerr" || fe.Code != fiETRUNC ||
					!strings.Contains(res[1].err.Error(), strconv.Quote(pv.prov)) {
					t.Errorf("error %v lacks the *Error or provider", res[1].err)
				}
				if pv.prov == "tcp;ofi_rxm" && n <= 16384 {
					// libfabric 1.17's tcp provider leaves the rest of a
					// truncated eager message (up to FI_OFI_RXM_EAGER_LIMIT,
					// 16 KiB) on the connection, which then hangs:
					// https://github.com/ofiwg/libfabric/issues/8274, fixed
					// in later releases.
					t.Logf("not reusing the connection after an eager truncation on %s (libfabric issue 8274)", pv.prov)
					return
				}
				got := make([]byte, 10)
				rr, _ = p.b.Recv(p.ba, 6, got, nil)
				sr, _ = p.a.Send(p.ab, 6, []byte("still ok"), nil)
				res = p.wait(t, sr, rr)
				if res[1].err != nil || string(got[:res[1].n]) != "still ok" {
					t.Fatalf("after truncation: %d %v %q", res[1].n, res[1].err, got)
				}
			})
		}
	}
}

// TestClose checks that requests in flight fail with ErrClosed and that
// everything after Close does too, without crashing.
func TestClose(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			need(t, pv.prov)
			e, err := Open(pv.prov)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			peer := open(t, pv.prov)
			addr := insert(t, e, peer)
			m, err := e.Register(make([]byte, 64))
			if err != nil {
				t.Fatal(err)
			}
			r, err := e.Recv(AddrUnspec, 99, make([]byte, 64), nil)
			if err != nil {
				t.Fatal(err)
			}
			// A Wait that gives up leaves the receive posted.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			if _, err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait: %v, want DeadlineExceeded", err)
			}
			waited := make(chan error, 1)
			go func() {
				_, err := r.Wait(context.Background())
				waited <- err
			}()
			time.Sleep(5 * time.Millisecond)
			if err := e.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			select {
			case err := <-waited:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("Wait after Close: %v, want ErrClosed", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("Wait did not return after Close")
			}
			if done, _, err := r.Test(); !done || !errors.Is(err, ErrClosed) {
				t.Errorf("Test after Close: %v %v", done, err)
			}
			if err := e.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := m.Close(); err != nil {
				t.Errorf("MR Close after endpoint Close: %v", err)
			}
			if _, err := e.Send(addr, 1, []byte("x"), nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Send after Close: %v", err)
			}
			if _, err := e.Recv(addr, 1, make([]byte, 1), nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Recv after Close: %v", err)
			}
			if _, err := e.Progress(); !errors.Is(err, ErrClosed) {
				t.Errorf("Progress after Close: %v", err)
			}
			if _, err := e.Name(); !errors.Is(err, ErrClosed) {
				t.Errorf("Name after Close: %v", err)
			}
			if _, err := e.Insert([]byte("x")); !errors.Is(err, ErrClosed) {
				t.Errorf("Insert after Close: %v", err)
			}
			if _, err := e.Register(nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Register after Close: %v", err)
			}
		})
	}
}

// TestManyInFlight has 200 small messages in flight at once, sent from
// several goroutines and waited for concurrently.
func TestManyInFlight(t *testing.T) {
	const n, size, senders = 200, 64, 4
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			p := openPair(t, pv.prov)
			bufs := make([][]byte, n)
			rreqs := make([]*Request, n)
			for i := range bufs {
				bufs[i] = make([]byte, size)
				r, err := p.b.Recv(p.ba, uint64(i), bufs[i], nil)
				if err != nil {
					t.Fatal(err)
				}
				rreqs[i] = r
			}
			sreqs := make([]*Request, n)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for s := 0; s < senders; s++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := s; i < n; i += senders {
						r, err := p.a.Send(p.ab, uint64(i), pattern(size, byte(i)), nil)
						if err != nil {
							errs <- err
							return
						}
						sreqs[i] = r
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			results := make([]error, 2*n)
			for i, r := range append(sreqs, rreqs...) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, results[i] = r.Wait(ctx)
				}()
			}
			wg.Wait()
			for i, err := range results {
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			for i := range bufs {
				checkData(t, fmt.Sprintf("message %d", i), bufs[i], pattern(size, byte(i)))
			}
		})
	}
}

// TestRegistered uses MRs on the provider as it is, and with local
// registration forced on (the FI_MR_LOCAL path of verbs and EFA): sub-slices
// of a registered buffer travel through its staging region.
func TestRegistered(t *testing.T) {
	for _, pv := range providers {
		for _, force := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mrlocal=%v", pv.name, force), func(t *testing.T) {
				p := openPair(t, pv.prov)
				if force {
					p.a.mrLocal, p.b.mrLocal = true, true
				}
				const size = 1 << 20
				sbuf, rbuf := make([]byte, size), make([]byte, size)
				sm, err := p.a.Register(sbuf)
				if err != nil {
					t.Fatalf("Register: %v", err)
				}
				rm, err := p.b.Register(rbuf)
				if err != nil {
					t.Fatalf("Register: %v", err)
				}
				if (sm.stage != nil) != (force || p.a.info.MRLocal) {
					t.Errorf("MR staging %v with mrLocal %v", sm.stage != nil, p.a.mrLocal)
				}
				// Two transfers in flight on disjoint halves, plus one
				// without an MR (a per-message registration when forced).
				copy(sbuf, pattern(size, 9))
				r1, err := p.b.Recv(p.ba, 1, rbuf[:size/2], rm)
				if err != nil {
					t.Fatal(err)
				}
				r2, err := p.b.Recv(p.ba, 2, rbuf[size/2:], rm)
				if err != nil {
					t.Fatal(err)
				}
				other := make([]byte, 5000)
				r3, err := p.b.Recv(p.ba, 3, other, nil)
				if err != nil {
					t.Fatal(err)
				}
				if force {
					if err := rm.Close(); err == nil {
						t.Error("MR Close with requests in flight succeeded")
					}
				}
				s1, err := p.a.Send(p.ab, 1, sbuf[:size/2], sm)
				if err != nil {
					t.Fatal(err)
				}
				s2, err := p.a.Send(p.ab, 2, sbuf[size/2:], sm)
				if err != nil {
					t.Fatal(err)
				}
				s3, err := p.a.Send(p.ab, 3, pattern(5000, 4), nil)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range p.wait(t, s1, s2, s3, r1, r2, r3) {
					if r.err != nil {
						t.Fatalf("request %d: %v", i, r.err)
					}
				}
				checkData(t, "registered", rbuf, sbuf)
				checkData(t, "unregistered", other, pattern(5000, 4))
				if force {
					if _, err := p.a.Send(p.ab, 1, make([]byte, 10), sm); err == nil {
						t.Error("Send of a buffer outside the MR succeeded")
					}
				}
				if err := sm.Close(); err != nil {
					t.Errorf("MR Close: %v", err)
				}
				if err := rm.Close(); err != nil {
					t.Errorf("MR Close: %v", err)
				}
				if err := rm.Close(); err != nil {
					t.Errorf("second MR Close: %v", err)
				}
			})
		}
	}
}

// TestNoLeaks opens, uses and closes endpoints repeatedly and checks that
// file descriptors, /dev/shm entries and threads come back to where they
// were.
func TestNoLeaks(t *testing.T) {
	cycle := func(prov string) {
		p := &pair{}
		var err error
		if p.a, err = Open(prov); err != nil {
			t.Fatal(err)
		}
		if p.b, err = Open(prov); err != nil {
			t.Fatal(err)
		}
		p.ab = insert(t, p.a, p.b)
		p.ba = insert(t, p.b, p.a)
		got := make([]byte, 70000)
		rr, _ := p.b.Recv(p.ba, 1, got, nil)
		sr, _ := p.a.Send(p.ab, 1, pattern(70000, 1), nil)
		p.wait(t, sr, rr)
		rr, _ = p.a.Recv(p.ab, 1, got, nil) // left in flight
		if err := p.a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.b.Close(); err != nil {
			t.Fatal(err)
		}
		if done, _, err := rr.Test(); !done || !errors.Is(err, ErrClosed) {
			t.Fatalf("in-flight receive after Close: %v %v", done, err)
		}
	}
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			need(t, pv.prov)
			cycle(pv.prov) // warm up libfabric's global state
			fds, shm, threads := countFDs(t), dirNames("/dev/shm"), countThreads()
			for i := 0; i < 5; i++ {
				cycle(pv.prov)
			}
			var after int
			for try := 0; try < 50; try++ {
				if after = countFDs(t); after == fds {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if after != fds {
				t.Errorf("file descriptors: %d before, %d after 5 open/close cycles", fds, after)
			}
			for name := range dirNames("/dev/shm") {
				if !shm[name] && strings.Contains(name, strconv.Itoa(os.Getpid())) {
					t.Errorf("/dev/shm/%s left behind", name)
				}
			}
			// Go may start a thread or two; a thread per endpoint would
			// show as 10 or more.
			if got := countThreads(); got > threads+3 {
				t.Errorf("threads: %d before, %d after 5 open/close cycles", threads, got)
			}
		})
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func countThreads() int {
	ents, _ := os.ReadDir("/proc/self/task")
	return len(ents)
}

func dirNames(dir string) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// BenchmarkPingPong bounces a message between two endpoints of one
// process; ns/op is one round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, pv := range providers {
		for _, size := range []int{8, 1 << 20} {
			name := fmt.Sprintf("%s/%dB", pv.name, size)
			if size >= 1<<20 {
				name = fmt.Sprintf("%s/%dMiB", pv.name, size>>20)
			}
			b.Run(name, func(b *testing.B) {
				p := openPair(b, pv.prov)
				sbuf, abuf, bbuf := pattern(size, 1), make([]byte, size), make([]byte, size)
				b.SetBytes(int64(2 * size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					tag := uint64(i)
					rb, err := p.b.Recv(p.ba, tag, bbuf, nil)
					if err != nil {
						b.Fatal(err)
					}
					ra, err := p.a.Recv(p.ab, tag, abuf, nil)
					if err != nil {
						b.Fatal(err)
					}
					sa, err := p.a.Send(p.ab, tag, sbuf, nil)
					if err != nil {
						b.Fatal(err)
					}
					p.wait(b, sa, rb)
					sb, err := p.b.Send(p.ba, tag, bbuf, nil)
					if err != nil {
						b.Fatal(err)
					}
					p.wait(b, sb, ra)
				}
				b.StopTimer()
				checkData(b, "ping-pong", abuf, sbuf)
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "µs/half-rtt")
			})
		}
	}
}

// mmapped returns n bytes of anonymous shared memory outside the Go heap.
func mmapped(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	if err != nil {
		tb.Fatalf("mmap: %v", err)
	}
	tb.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// TestExternal sends and receives zero-copy on mmapped memory, with and
// without local registration, mixed with copying transfers.
func TestExternal(t *testing.T) {
	for _, pv := range providers {
		for _, force := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mrlocal=%v", pv.name, force), func(t *testing.T) {
				p := openPair(t, pv.prov)
				if force {
					p.a.mrLocal, p.b.mrLocal = true, true
				}
				const size = 1<<20 + 13
				smem, rmem := mmapped(t, size+8192), mmapped(t, size+8192)
				sm, err := p.a.RegisterExternal(smem)
				if err != nil {
					t.Fatalf("RegisterExternal: %v", err)
				}
				rm, err := p.b.RegisterExternal(rmem)
				if err != nil {
					t.Fatalf("RegisterExternal: %v", err)
				}
				if !sm.External() || (sm.mr != nil) != (force || p.a.info.MRLocal) {
					t.Errorf("external MR: external %v, registered %v", sm.External(), sm.mr != nil)
				}
				// Disjoint parts of the memory, all in flight at once.
				sizes := []int{0, 1, 4093, size}
				var reqs []*Request
				off := 0
				for i, n := range sizes {
					copy(smem[off:], pattern(n, byte(i)))
					r, err := p.b.Recv(p.ba, uint64(10+i), rmem[off:off+n], rm)
					if err != nil {
						t.Fatal(err)
					}
					s, err := p.a.Send(p.ab, uint64(10+i), smem[off:off+n], sm)
					if err != nil {
						t.Fatal(err)
					}
					reqs = append(reqs, r, s)
					off += n
				}
				res := p.wait(t, reqs...)
				off = 0
				for i, n := range sizes {
					if res[2*i].err != nil || res[2*i+1].err != nil {
						t.Fatalf("size %d: recv %v, send %v", n, res[2*i].err, res[2*i+1].err)
					}
					if res[2*i].n != n || res[2*i+1].n != n {
						t.Fatalf("size %d: recv n %d, send n %d", n, res[2*i].n, res[2*i+1].n)
					}
					checkData(t, fmt.Sprintf("size %d", n), rmem[off:off+n], pattern(n, byte(i)))
					off += n
				}
				if _, err := p.a.Send(p.ab, 1, make([]byte, 10), sm); err == nil {
					t.Error("Send of a buffer outside the external MR succeeded")
				}
				if err := sm.Close(); err != nil {
					t.Errorf("MR Close: %v", err)
				}
				if err := rm.Close(); err != nil {
					t.Errorf("MR Close: %v", err)
				}
			})
		}
	}
}

// TestCancel cancels a posted receive that nothing matches, and checks
// Status, which does not progress.
func TestCancel(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			p := openPair(t, pv.prov)
			r, err := p.b.Recv(p.ba, 77, make([]byte, 100), nil)
			if err != nil {
				t.Fatal(err)
			}
			if done, _, err := r.Status(); done || err != nil {
				t.Fatalf("Status of a pending receive: %v, %v", done, err)
			}
			if err := r.Cancel(); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			res := p.wait(t, r)
			if !errors.Is(res[0].err, syscall.ECANCELED) {
				t.Fatalf("cancelled receive: %v, want ECANCELED", res[0].err)
			}
			if done, _, err := r.Status(); !done || !errors.Is(err, syscall.ECANCELED) {
				t.Fatalf("Status after completion: %v, %v", done, err)
			}
			if err := r.Cancel(); err != nil {
				t.Errorf("Cancel of a done request: %v", err)
			}
			// The tag is usable again.
			rr, err := p.b.Recv(p.ba, 77, make([]byte, 100), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := p.a.Send(p.ab, 77, pattern(100, 1), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range p.wait(t, rr, s) {
				if x.err != nil {
					t.Fatal(x.err)
				}
			}
		})
	}
}

func TestOpenDomain(t *testing.T) {
	need(t, "tcp;ofi_rxm")
	e, err := OpenDomain("tcp;ofi_rxm", "lo")
	if err != nil {
		t.Fatalf("OpenDomain(lo): %v", err)
	}
	if d := e.Info().Domain; d != "lo" {
		t.Errorf("domain %q, want lo", d)
	}
	e.Close()
	_, err = OpenDomain("tcp;ofi_rxm", "no-such-domain0")
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != int(syscall.ENODATA) {
		t.Errorf("OpenDomain of an unknown domain: %v, want FI_ENODATA", err)
	}
}
