package tcp

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// loopbackPair returns the two ends of a TCP connection over 127.0.0.1.
func loopbackPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan *net.TCPConn, 1)
	go func() {
		c, err := l.AcceptTCP()
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	a, err = net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	b = <-done
	if b == nil {
		t.FailNow()
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The first stream's reader spins only within its window, which follows
// how soon data comes: a Read that waits long costs little CPU, a late
// message halves the window, a prompt one doubles it back, and a reader
// whose window closed tries again every probeEvery Reads. Bytes, the end
// of the stream and a local close come through as from the socket.
func TestSpinReader(t *testing.T) {
	const spin = 2 * time.Millisecond // long, so that "prompt" holds on a loaded machine
	a, b := loopbackPair(t)
	r := streamReader(b, spin).(*spinReader)
	buf := make([]byte, 64)

	// A message that comes after the window: the Read blocks in the
	// netpoller rather than spinning the whole time.
	go func() {
		time.Sleep(100 * time.Millisecond)
		a.Write([]byte("late"))
	}()
	cpu0 := cpuTime(t)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "late" {
		t.Fatalf("Read = %q, %v; want \"late\"", buf[:n], err)
	}
	if used := cpuTime(t) - cpu0; used > 40*time.Millisecond {
		t.Errorf("a Read that waited 100 ms used %v of CPU: it spun past its window of %v", used, spin)
	}
	if r.window != spin/2 {
		t.Errorf("window after a late message = %v, want %v", r.window, spin/2)
	}

	// A message already there: taken while spinning, and the window grows.
	a.Write([]byte("prompt"))
	time.Sleep(10 * time.Millisecond)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "prompt" {
		t.Fatalf("Read = %q, %v; want \"prompt\"", buf[:n], err)
	}
	if r.window != spin {
		t.Errorf("window after a prompt message = %v, want %v", r.window, spin)
	}

	// Late messages close the window; it opens again on the probe.
	r.window = time.Microsecond
	a.Write([]byte("x"))
	time.Sleep(5 * time.Millisecond)
	r.window = 0 // as if the last messages came late
	for i := 1; i < probeEvery; i++ {
		if r.Read(buf); r.window != 0 {
			t.Fatalf("window opened on Read %d, before the probe (every %d)", i, probeEvery)
		}
		a.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	if n, err := r.Read(buf); err != nil || n == 0 {
		t.Fatalf("probe Read = %d, %v", n, err)
	}
	if r.window == 0 {
		t.Errorf("window still closed after the probe Read found data at once")
	}

	// The peer's end, then a local close.
	a.CloseWrite()
	for {
		_, err = r.Read(buf)
		if err != nil {
			break
		}
	}
	if err != io.EOF {
		t.Errorf("Read after the peer's end = %v, want io.EOF", err)
	}
	b.Close()
	if _, err := r.Read(buf); !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.EBADF) {
		t.Errorf("Read after Close = %v, want net.ErrClosed", err)
	}
}
