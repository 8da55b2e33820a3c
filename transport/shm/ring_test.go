//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/shmring"
	"github.com/gorun/gorun/transport"
)

func testRing(size int) (producer, consumer *ring) {
	mem := make([]byte, size)
	var head, tail uint64
	producer = shmring.New(mem, &head, &tail, false)
	consumer = shmring.New(mem, &head, &tail, true)
	return producer, consumer
}

// TestRingWraps pushes records of every size through a small ring, so that
// they pad and wrap at every offset, and checks each comes out intact.
func TestRingWraps(t *testing.T) {
	p, c := testRing(4096)
	max := p.MaxPayload()
	next := 0
	taken := 0
	for sent := 0; sent < 3000; {
		payload := bytes.Repeat([]byte{byte(sent)}, sent%(max+1))
		if p.Put(recEager, uint64(sent), 2, 3, payload) {
			sent++
			continue
		}
		// Full: take one.
		x, ok, err := c.Next()
		if err != nil || !ok {
			t.Fatalf("ring full but nothing to take: %v", err)
		}
		if x.A != uint64(next) || len(x.Payload) != next%(max+1) || (len(x.Payload) > 0 && x.Payload[0] != byte(next)) {
			t.Fatalf("record %d: a=%d, %d bytes", next, x.A, len(x.Payload))
		}
		c.Release(x)
		next++
		taken++
	}
	for {
		x, ok, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if x.A != uint64(next) {
			t.Fatalf("record %d: a=%d", next, x.A)
		}
		c.Release(x)
		next++
	}
	if next != 3000 {
		t.Fatalf("took %d records, want 3000", next)
	}
	if p.Put(recEager, 0, 0, 0, make([]byte, max+1)) {
		t.Error("put accepted a payload over maxPayload")
	}
}

// FuzzRingNext feeds garbage to a consumer: it must fail or return records
// inside the ring, never panic.
func FuzzRingNext(f *testing.F) {
	mem := make([]byte, 1024)
	var h, tl uint64
	shmring.New(mem, &h, &tl, false).Put(recEager, 1, 2, 3, []byte("hello"))
	f.Add(mem, uint64(64), uint64(0))
	f.Add(make([]byte, 1024), uint64(1000), uint64(990))
	f.Fuzz(func(t *testing.T, mem []byte, head, tail uint64) {
		buf := make([]byte, 1024)
		copy(buf, mem)
		tail &^= shmring.Align - 1
		r := shmring.New(buf, &head, &tail, true)
		for range 64 {
			x, ok, err := r.Next()
			if err != nil {
				if !errors.Is(err, transport.ErrProtocol) {
					t.Fatalf("error %v is not ErrProtocol", err)
				}
				return
			}
			if !ok {
				return
			}
			r.Release(x)
		}
	})
}

func TestHandle(t *testing.T) {
	h := handle{boot: bootID(), nonce: [16]byte{1, 15: 2}, name: "gorun-shm-0123456789abcdef01234567"}
	b := h.marshal()
	if len(b) > transport.MaxHandleSize {
		t.Fatalf("handle of %d bytes", len(b))
	}
	if got, err := parseHandle(b); err != nil || got != h {
		t.Fatalf("parseHandle(marshal(h)) = %+v, %v", got, err)
	}
	other := h
	other.boot[0] ^= 1
	tr, _ := New(Options{})
	defer tr.Close()
	if _, err := tr.Connect(t.Context(), other.marshal()); !errors.Is(err, transport.ErrBadHandle) {
		t.Errorf("Connect with another host's handle = %v, want ErrBadHandle", err)
	}
	// A handle whose nonce is wrong reaches the listener, which refuses it.
	l, err := tr.Listen(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wrong := l.Handle()
	wrong[len(wrong)-1] ^= 1
	if _, err := tr.Connect(t.Context(), wrong); !errors.Is(err, transport.ErrBadHandle) {
		t.Errorf("Connect with a wrong nonce = %v, want ErrBadHandle", err)
	}
}

func FuzzParseHandle(f *testing.F) {
	f.Add([]byte(handle{name: "x"}.marshal()))
	f.Add([]byte("s\x01garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHandle(b)
		if err != nil {
			if !errors.Is(err, transport.ErrBadHandle) {
				t.Fatalf("error %v does not wrap ErrBadHandle", err)
			}
			return
		}
		if again := h.marshal(); !bytes.Equal(again, b) {
			t.Fatalf("marshal(parse(% x)) = % x", b, again)
		}
	})
}

func FuzzParseMsg(f *testing.F) {
	f.Add(sockMsg{typ: msgReg, a: 1, b: 2}.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMsg(b)
		if err != nil {
			return
		}
		if again := m.marshal(); !bytes.Equal(again[:6], b[:6]) || !bytes.Equal(again[8:], b[8:]) {
			t.Fatalf("marshal(parse(% x)) = % x", b, again)
		}
	})
}

// TestZeroCopyPath checks that a send from a registered Region goes by the
// receiver mapping the region (RTS, then FIN), not through the ring.
func TestZeroCopyPath(t *testing.T) {
	a, _ := New(Options{})
	b, _ := New(Options{})
	defer a.Close()
	defer b.Close()
	l, err := b.Listen(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan transport.RecvConn, 1)
	go func() {
		rc, err := l.Accept(t.Context())
		if err != nil {
			t.Error(err)
		}
		acc <- rc
	}()
	sc, err := a.Connect(t.Context(), l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	rc := <-acc
	reg, err := transport.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	mh, err := sc.RegMR(reg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rcc := rc.(*recvConn)
	rcc.mu.Lock()
	n := len(rcc.regions)
	rcc.mu.Unlock()
	if n != 1 {
		t.Fatalf("receiver mapped %d regions, want 1", n)
	}
	src := reg.Bytes()[100 : 100+(3<<20)]
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, len(src))
	headBefore := sc.(*sendConn).seg.data.Head()
	rr, _ := rc.Irecv(dst, 1, nil)
	sr, err := sc.Isend(src, 1, mh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data differs")
	}
	if used := sc.(*sendConn).seg.data.Head() - headBefore; used > shmring.Align {
		t.Errorf("the message took %d bytes of the ring; zero copy takes one RTS record", used)
	}
	if err := sc.DeregMR(mh); err != nil {
		t.Fatal(err)
	}
	// The receiver unmaps the region once it hears of the release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rcc.mu.Lock()
		n := len(rcc.regions)
		rcc.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the receiver still maps the released region")
		}
		time.Sleep(time.Millisecond)
	}
}

// pair connects two transports made with opts and returns the two sides.
func pair(t *testing.T, opts Options) (*sendConn, *recvConn) {
	t.Helper()
	a, _ := New(opts)
	b, _ := New(opts)
	t.Cleanup(func() { a.Close(); b.Close() })
	l, err := b.Listen(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	acc := make(chan transport.RecvConn, 1)
	go func() {
		rc, err := l.Accept(t.Context())
		if err != nil {
			t.Error(err)
		}
		acc <- rc
	}()
	sc, err := a.Connect(t.Context(), l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	return sc.(*sendConn), (<-acc).(*recvConn)
}

// TestCMAPath checks how a large send from ordinary memory travels: read
// by the receiver from the sender (one RTS record in the ring), through
// the ring when the kernel refuses that read (here: a process that does
// not exist), and through the ring without CMA (the default).
func TestCMAPath(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		badPID   bool
		wantRing bool
	}{
		{"cma", Options{CMA: true}, false, false},
		{"refused", Options{CMA: true}, true, true},
		{"off", Options{}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, rc := pair(t, tc.opts)
			if tc.badPID {
				rc.mu.Lock()
				rc.pid = 1<<22 - 3 // above pid_max's default: no such process
				rc.mu.Unlock()
			}
			src := make([]byte, 3<<20+5)
			for i := range src {
				src[i] = byte(i * 13)
			}
			dst := make([]byte, len(src))
			before := sc.seg.data.Head()
			rr, _ := rc.Irecv(dst, 1, nil)
			sr, err := sc.Isend(src, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sr.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n, err := rr.Wait(t.Context()); err != nil || n != len(src) {
				t.Fatalf("received %d, %v", n, err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("data differs")
			}
			used := sc.seg.data.Head() - before
			if tc.wantRing != (used > uint64(len(src))) {
				t.Errorf("the message took %d bytes of the ring (want it through the ring: %v)", used, tc.wantRing)
			}
		})
	}
}
