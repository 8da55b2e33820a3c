package transporttest

import (
	"context"
	"sync"
	"testing"

	"github.com/gorun/gorun/transport"
)

// benchConnect connects two fresh transports both ways for a benchmark.
func benchConnect(b *testing.B, newTransport func(testing.TB) transport.Transport) (ab transport.SendConn, atB transport.RecvConn, ba transport.SendConn, btA transport.RecvConn) {
	b.Helper()
	ta, tb := newTransport(b), newTransport(b)
	b.Cleanup(func() { ta.Close(); tb.Close() })
	link := func(from, to transport.Transport) (transport.SendConn, transport.RecvConn) {
		ctx := context.Background()
		l, err := to.Listen(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		ch := make(chan transport.RecvConn, 1)
		go func() {
			rc, err := l.Accept(ctx)
			if err != nil {
				b.Error(err)
			}
			ch <- rc
		}()
		sc, err := from.Connect(ctx, l.Handle())
		if err != nil {
			b.Fatal(err)
		}
		rc := <-ch
		if rc == nil {
			b.FailNow()
		}
		return sc, rc
	}
	ab, atB = link(ta, tb)
	ba, btA = link(tb, ta)
	return
}

// buffers returns n buffers of size bytes, from Regions registered on c
// when registered is true (then the MemHandles are returned too).
func buffers(b *testing.B, c transport.Conn, n, size int, registered bool) ([][]byte, []transport.MemHandle) {
	b.Helper()
	bufs := make([][]byte, n)
	mhs := make([]transport.MemHandle, n)
	if !registered {
		for i := range bufs {
			bufs[i] = make([]byte, size)
		}
		return bufs, mhs
	}
	r, err := transport.Alloc(max(1, n*size))
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { r.Close() })
	mh, err := c.RegMR(r.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	for i := range bufs {
		bufs[i] = r.Bytes()[i*size : (i+1)*size]
		mhs[i] = mh
	}
	return bufs, mhs
}

// BenchPingPong measures round trips of size-byte messages between two
// transports: ns/op is one round trip (twice the one-way latency).
func BenchPingPong(b *testing.B, newTransport func(testing.TB) transport.Transport, size int) {
	ab, atB, ba, btA := benchConnect(b, newTransport)
	ctx := context.Background()
	done := make(chan error, 1)
	n := b.N
	go func() {
		buf := make([]byte, size)
		for range n {
			r, err := atB.Irecv(buf, 0, nil)
			if err == nil {
				_, err = r.Wait(ctx)
			}
			if err == nil {
				r, err = ba.Isend(buf, 0, nil)
			}
			if err == nil {
				_, err = r.Wait(ctx)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	ping, pong := make([]byte, size), make([]byte, size)
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range n {
		rr, err := btA.Irecv(pong, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		sr, err := ab.Isend(ping, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := transport.WaitAll(ctx, sr, rr); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchBandwidth streams size-byte messages one way with up to window
// requests in flight on each side (from registered Regions when
// registered), and reports bytes per second of messages received.
func BenchBandwidth(b *testing.B, newTransport func(testing.TB) transport.Transport, size, window int, registered bool) {
	ab, atB, _, _ := benchConnect(b, newTransport)
	ctx := context.Background()
	src, smh := buffers(b, ab, window, size, registered)
	dst, rmh := buffers(b, atB, window, size, registered)
	n := b.N
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := pipeline(ctx, n, window, func(i int) (transport.Request, error) {
			return atB.Irecv(dst[i%window], 0, rmh[i%window])
		}); err != nil {
			b.Error(err)
		}
	}()
	if err := pipeline(ctx, n, window, func(i int) (transport.Request, error) {
		return ab.Isend(src[i%window], 0, smh[i%window])
	}); err != nil {
		b.Error(err)
	}
	wg.Wait()
}

// pipeline starts n requests keeping at most window in flight.
func pipeline(ctx context.Context, n, window int, start func(i int) (transport.Request, error)) error {
	ring := make([]transport.Request, window)
	for i := range n + window {
		slot := i % window
		if i >= window {
			if _, err := ring[slot].Wait(ctx); err != nil {
				return err
			}
		}
		if i < n {
			r, err := start(i)
			if err != nil {
				return err
			}
			ring[slot] = r
		}
	}
	return nil
}
