package tcp

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spinReader reads a connection's first stream (eager messages and
// control) for its goroutine: from the start of each Read, for up to a
// spin window, without blocking, trying the socket again and yielding in
// between (to the process's other goroutines, then to other processes),
// and only then in the netpoller. A small message is taken as it lands
// instead of once an idle processor was woken for it, which on a virtual
// machine costs more than the message (a 4 KiB AllReduce of two hosts: 26
// us blocking, 10 us spinning; MPICH's 15-16).
//
// The window adapts: it doubles (up to spin) after a Read whose data came
// within it, and halves (down to none) after one whose data came later:
// spinning was then CPU time taken from whatever the peer waited for
// (where ranks share CPUs, 4 ranks on 2 took 1.2x as long with a fixed
// window). Every probeEvery-th Read without a window spins again, to
// learn whether the data has come to arrive sooner. The cost is at most
// the window's CPU time per Read.
type spinReader struct {
	rc     syscall.RawConn
	spin   time.Duration
	window time.Duration
	idle   int // Reads since the window closed

	// The read in progress, and the functions RawConn.Read calls for it:
	// method values made once, so that a Read allocates nothing.
	p       []byte
	n       int
	err     error
	try     func(fd uintptr) bool
	waitFor func(fd uintptr) bool
}

// tryRead reads once, never waiting.
func (s *spinReader) tryRead(fd uintptr) bool {
	s.n, s.err = unix.Read(int(fd), s.p)
	return true
}

// readOrWait reads, and has RawConn.Read wait in the netpoller while there
// is nothing to read.
func (s *spinReader) readOrWait(fd uintptr) bool {
	s.n, s.err = unix.Read(int(fd), s.p)
	return s.err != unix.EAGAIN
}

// probeEvery is how often a reader whose window closed tries spinning.
const probeEvery = 64

// streamReader returns what reads stream sc: sc itself, or a spinReader
// when spin is positive.
func streamReader(sc *net.TCPConn, spin time.Duration) io.Reader {
	if spin <= 0 {
		return sc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return sc
	}
	s := &spinReader{rc: rc, spin: spin, window: spin}
	s.try, s.waitFor = s.tryRead, s.readOrWait
	return s
}

// Read implements io.Reader.
func (s *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.p = p
	defer func() { s.p = nil }()
	start := time.Now()
	if s.window == 0 {
		if s.idle++; s.idle == probeEvery {
			s.idle, s.window = 0, s.spin
		}
	}
	for i := 1; s.window > 0; i++ {
		if err := s.rc.Read(s.try); err != nil {
			return 0, err
		}
		if s.err != unix.EAGAIN {
			s.window = min(s.spin, 2*s.window)
			return readResult(s.n, s.err)
		}
		if i%8 == 0 && time.Since(start) > s.window {
			break
		}
		runtime.Gosched()
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	if err := s.rc.Read(s.waitFor); err != nil {
		return 0, err
	}
	if s.window /= 2; s.window < time.Microsecond {
		s.window = 0
	}
	return readResult(s.n, s.err)
}

// readResult turns read(2)'s result into io.Reader's.
func readResult(n int, err error) (int, error) {
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
