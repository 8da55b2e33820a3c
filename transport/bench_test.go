package transport_test

import (
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/tcp"
	"github.com/gorun/gorun/transport/transporttest"
)

// The transports' data paths, and beside them the machine's limits: memcpy
// bandwidth and a raw loopback TCP socket. Both ends of every benchmark run
// in this process, on separate goroutines.

var benchSizes = []int{4 << 10, 64 << 10, 1 << 20, 4 << 20, 64 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// window keeps about 64 MiB in flight, at most 16 messages.
func window(size int) int { return max(2, min(16, (64<<20)/size)) }

type benchTransport struct {
	name       string
	registered bool
	new        func(testing.TB) transport.Transport
}

func tcpTransport(streams int) func(testing.TB) transport.Transport {
	return func(tb testing.TB) transport.Transport {
		tr, err := tcp.New(tcp.Options{Iface: "lo", Streams: streams})
		if err != nil {
			tb.Fatal(err)
		}
		return tr
	}
}

func shmTransport(opts shm.Options) func(testing.TB) transport.Transport {
	return func(tb testing.TB) transport.Transport {
		tr, err := shm.New(opts)
		if err != nil {
			tb.Fatal(err)
		}
		return tr
	}
}

func benchTransports() []benchTransport {
	return []benchTransport{
		{name: "tcp", new: tcpTransport(0)}, // tcp.DefaultStreams
		{name: "tcp-1stream", new: tcpTransport(1)},
		{name: "tcp-4streams", new: tcpTransport(4)},
		{name: "shm", new: shmTransport(shm.Options{})},
		{name: "shm-nospin", new: shmTransport(shm.Options{Spin: -1})},
		{name: "shm-ring4MiB", new: shmTransport(shm.Options{RingSize: 4 << 20})},
		{name: "shm-registered", new: shmTransport(shm.Options{}), registered: true},
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, bt := range benchTransports() {
		if bt.registered {
			continue
		}
		b.Run(bt.name, func(b *testing.B) { transporttest.BenchPingPong(b, bt.new, 8) })
	}
	b.Run("raw-tcp", func(b *testing.B) { benchRawPingPong(b, 8) })
}

func BenchmarkBandwidth(b *testing.B) {
	for _, bt := range benchTransports() {
		for _, size := range benchSizes {
			b.Run(bt.name+"/"+sizeName(size), func(b *testing.B) {
				transporttest.BenchBandwidth(b, bt.new, size, window(size), bt.registered)
			})
		}
	}
}

// BenchmarkMemcpy is the bound for any shared-memory transport: a copy
// between two buffers of size bytes (cache-warm for the small sizes).
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			for range b.N {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkLoopbackTCP is the bound for the TCP transport: one raw TCP
// connection on loopback, size-byte writes from one goroutine, reads into a
// size-byte buffer on another.
func BenchmarkLoopbackTCP(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			w, r := rawPair(b)
			done := make(chan error, 1)
			n := b.N
			go func() {
				buf := make([]byte, size)
				for range n {
					if _, err := io.ReadFull(r, buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range n {
				if _, err := w.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func benchRawPingPong(b *testing.B, size int) {
	c1, c2 := rawPair(b)
	n := b.N
	go func() {
		buf := make([]byte, size)
		for range n {
			if _, err := io.ReadFull(c2, buf); err != nil {
				return
			}
			if _, err := c2.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, size)
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range n {
		if _, err := c1.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c1, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// rawPair returns both ends of a loopback TCP connection (TCP_NODELAY on,
// as Go sets it).
func rawPair(b *testing.B) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			b.Error(err)
		}
		ch <- c
	}()
	c1, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2 := <-ch
	if c2 == nil {
		b.FailNow()
	}
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}
