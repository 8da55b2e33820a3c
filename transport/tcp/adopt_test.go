package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/tcp"
)

// socketPairs returns n connected loopback TCP streams: the dialing ends
// and the accepted ends, as files, in the same order.
func socketPairs(t *testing.T, n int) (dialed, accepted []*os.File) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range n {
		d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []*net.TCPConn{d, a} {
			f, err := c.File()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			if c == d {
				dialed = append(dialed, f)
			} else {
				accepted = append(accepted, f)
			}
		}
	}
	return dialed, accepted
}

func adopter(t *testing.T) *tcp.Transport {
	t.Helper()
	tr, err := tcp.ForSockets("adopter", tcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// Sockets connected elsewhere carry messages once adopted, large ones
// striped over the streams; the transport listens nowhere itself.
func TestAdopt(t *testing.T) {
	tr := adopter(t)
	if _, err := tr.Listen(context.Background()); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("Listen = %v, want ErrNotSupported", err)
	}
	dialed, accepted := socketPairs(t, 3)
	sc, err := tr.AdoptSend(dialed, "the peer")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := tr.AdoptRecv(accepted, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, size := range []int{0, 100, 8 << 20} {
		msg := bytes.Repeat([]byte{byte(size + 1)}, size)
		got := make([]byte, size)
		r, err := rc.Irecv(got, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sc.Isend(msg, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := transport.WaitAll(ctx, s, r); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: %v (equal %v)", size, err, bytes.Equal(got, msg))
		}
	}
}

// Streams given to the receiver in another order than the sender's, or a
// socket that is not TCP, are errors that say so, not garbled data.
func TestAdoptMisuse(t *testing.T) {
	tr := adopter(t)
	dialed, accepted := socketPairs(t, 2)
	sc, err := tr.AdoptSend(dialed, "the peer")
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	rc, err := tr.AdoptRecv([]*os.File{accepted[1], accepted[0]}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rc.Irecv(make([]byte, 10), 1, nil)
	if err == nil {
		_, err = r.Wait(ctx)
	}
	if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "in another order") || !strings.Contains(err.Error(), "adopter") {
		t.Errorf("receive on streams in the wrong order = %v", err)
	}

	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix := []*os.File{os.NewFile(uintptr(fds[0]), "unix"), os.NewFile(uintptr(fds[1]), "unix")}
	defer unix[1].Close()
	if _, err := tr.AdoptSend(unix[:1], "p"); err == nil || !strings.Contains(err.Error(), "not TCP") {
		t.Errorf("adopting a Unix socket = %v", err)
	}
	if _, err := tr.AdoptRecv(nil, "p"); err == nil {
		t.Error("adopting no sockets succeeded")
	}
}
