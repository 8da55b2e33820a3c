package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef-job-secret")

func startKV(t *testing.T, ranks []int, f Fencer, early func(int)) (string, *KVServer) {
	t.Helper()
	dir, err := SocketDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode %v, %v", fi.Mode(), err)
	}
	s, err := NewKVServer(KVConfig{Secret: testSecret, Ranks: ranks, Fencer: f, OnEarlyExit: early})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := s.Listen(ctx, dir, "kv.sock"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	return filepath.Join(dir, "kv.sock"), s
}

// TestKVTwoHosts runs two KVServers (two "hosts", 2 ranks each) over one
// Store with 2 members: one fence per host, and every rank sees every put.
func TestKVTwoHosts(t *testing.T) {
	st, _ := NewStore(2, StoreOptions{FenceTimeout: 10 * time.Second})
	paths := []string{}
	for h := 0; h < 2; h++ {
		p, _ := startKV(t, []int{2 * h, 2*h + 1}, st.Member(0, h), nil)
		paths = append(paths, p)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := Dial(ctx, paths[r/2], testSecret, r)
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			if err := cl.Put(fmt.Sprint("addr-", r), fmt.Sprint("host", r/2)); err != nil {
				t.Error(err)
			}
			if err := cl.Fence(ctx); err != nil {
				t.Error(err)
				return
			}
			for p := 0; p < 4; p++ {
				v, err := cl.Get(fmt.Sprint("addr-", p))
				if err != nil || v != fmt.Sprint("host", p/2) {
					t.Errorf("rank %d: Get(addr-%d) = %q, %v", r, p, v, err)
				}
			}
			if _, err := cl.Get("nope"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(nope): %v", err)
			}
		}()
	}
	wg.Wait()
	if st.Fences(0) != 1 {
		t.Errorf("store saw %d fences, want 1", st.Fences(0))
	}
}

func TestKVAuthAndEarlyExit(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	early := make(chan int, 1)
	path, _ := startKV(t, []int{0, 1}, st.Member(0, 0), func(r int) { early <- r })
	ctx := context.Background()
	if _, err := Dial(ctx, path, []byte("wrong-secret-wrong-secret"), 0); err == nil {
		t.Error("wrong secret accepted")
	}
	if _, err := Dial(ctx, path, testSecret, 7); err == nil {
		t.Error("unknown rank accepted")
	}
	c0, err := Dial(ctx, path, testSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, path, testSecret, 0); err == nil {
		t.Error("second connection for rank 0 accepted")
	}
	c1, err := Dial(ctx, path, testSecret, 1)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c0.Fence(ctx) }()
	time.Sleep(20 * time.Millisecond)
	c1.c.Close() // rank 1 dies without Close
	if r := <-early; r != 1 {
		t.Errorf("OnEarlyExit(%d)", r)
	}
	if err := <-errc; err == nil {
		t.Error("fence succeeded although rank 1 died")
	}
}

func TestKVFenceContext(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	path, _ := startKV(t, []int{0, 1}, st.Member(0, 0), nil)
	c0, err := Dial(context.Background(), path, testSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c0.Fence(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Fence: %v, want deadline exceeded", err)
	}
}

// FuzzKVDecode feeds arbitrary bytes to the frame reader and decoder.
func FuzzKVDecode(f *testing.F) {
	f.Add(encodeFrame(opHello, "secret", "0"))
	f.Add(encodeFrame(opPut, "k", "v"))
	f.Add(encodeFrame(opGet, "k"))
	f.Add(encodeFrame(opFence))
	f.Add(encodeFrame(opHello, "secret", "0", featAnswers))
	f.Add(encodeFrame(opBye))
	f.Add(encodeFrame(opBye, `{"calls":1}`))
	f.Add(encodeFrame(opDump, "1"))
	f.Add(encodeFrame(opProgress, "2"))
	f.Add(encodeFrame(opAnswer, "1", "goroutine 1 [running]:"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'P'})
	f.Add([]byte{0, 0, 0, 6, 'P', 0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			p, err := readFrame(r, 1<<16)
			if err != nil {
				return
			}
			op, fields, err := decodeFrame(p)
			if err != nil {
				continue
			}
			if got := encodeFrame(op, fields...); !bytes.Equal(got[4:], p) {
				t.Fatalf("re-encoding %q gives %q", p, got[4:])
			}
		}
	})
}

// FuzzKVServer sends arbitrary bytes after a valid hello (of a client that
// answers requests, or of an older one), while the server asks for the
// client's progress: the server replies or closes, never panics or hangs.
func FuzzKVServer(f *testing.F) {
	f.Add(encodeFrame(opPut, "k", "v"), false)
	f.Add(append(encodeFrame(opPut, "k", "v"), encodeFrame(opGet, "k")...), false)
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff}, false)
	f.Add(encodeFrame(opBye), false)
	f.Add(encodeFrame(opBye, `{"calls":3,"arrivals":[{"comm":"world","seq":1,"op":"barrier","at":5}]}`), true)
	f.Add(encodeFrame(opBye, `{"calls":`), true)
	f.Add(append(encodeFrame(opFence), encodeFrame(opAnswer, "1", `{"calls":1}`)...), true)
	f.Add(append(encodeFrame(opAnswer, "1", "{}"), encodeFrame(opAnswer, "1", "{}")...), true)
	f.Add(append(encodeFrame(opFence), encodeFrame(opPut, "k", "v")...), true)
	f.Add(encodeFrame(opDump, "1"), true)
	// The attacks of the security review (3a, 3d) after the hello: a
	// 1 GiB length, a field longer than its frame, bad UTF-8.
	f.Add([]byte{0x40, 0, 0, 0, opPut}, false)
	f.Add([]byte{0, 0, 0, 6, opPut, 0xff, 0xff, 0xff, 0xff, 0}, false)
	f.Add(encodeFrame(opPut, "k\xff", "\xc0"), false)
	f.Fuzz(func(t *testing.T, in []byte, answers bool) {
		st, _ := NewStore(1, StoreOptions{FenceTimeout: time.Second})
		s, err := NewKVServer(KVConfig{Secret: testSecret, Ranks: []int{0}, Fencer: st.Member(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); s.ServeConn(context.Background(), a) }()
		go func() { bytesDrain(b) }()
		b.SetDeadline(time.Now().Add(5 * time.Second))
		hello := []string{string(testSecret), "0"}
		if answers {
			hello = append(hello, featAnswers)
		}
		b.Write(encodeFrame(opHello, hello...))
		asked := make(chan struct{})
		go func() {
			defer close(asked)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			s.Progress(ctx, 0)
		}()
		b.Write(in)
		b.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("server did not return")
		}
		<-asked
		s.Final(0)
	})
}

// FuzzKVClient has a server send arbitrary bytes to a Client after its
// hello's reply, while the client makes a call: the client answers,
// fails the call or ends its reader, never panics, and Close returns.
func FuzzKVClient(f *testing.F) {
	f.Add(encodeFrame(opDump, "1"))
	f.Add(append(encodeFrame(opProgress, "7"), encodeFrame(opOK)...))
	f.Add(encodeFrame(opValue, "v"))
	f.Add(encodeFrame(opDump))
	f.Add(append(encodeFrame(opProgress, "1", "2"), encodeFrame(opErr, "no")...))
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		dir, err := os.MkdirTemp("", "fuzzkv")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		l, err := net.Listen("unix", filepath.Join(dir, "s"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			// The hello is read first: a server that hung up before it
			// arrived made the client's hello fail with EPIPE under load.
			if _, err := readFrame(c, 4096); err != nil {
				return
			}
			go bytesDrain(c)
			c.Write(encodeFrame(opOK))
			c.Write(in)
			time.Sleep(10 * time.Millisecond)
		}()
		cl, err := Dial(context.Background(), filepath.Join(dir, "s"), testSecret, 0)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			cl.Get("k")
			cl.Close()
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("client did not return")
		}
	})
}

func bytesDrain(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}
