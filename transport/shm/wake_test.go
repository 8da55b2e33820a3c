//go:build linux

package shm

import (
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkWake measures the ways one process can wake another that sleeps
// (ns/op is a round trip: two wake-ups), to choose the doorbell: a futex in
// shared memory, an eventfd read through Go's poller, a unix socket, and,
// for reference, both sides spinning on the shared word. The peer is the
// test binary re-executed (TestWakePeer).
func BenchmarkWake(b *testing.B) {
	for _, mode := range []string{"spin", "futex", "eventfd", "socket"} {
		b.Run(mode, func(b *testing.B) { benchWake(b, mode) })
	}
}

const envWakePeer = "GORUN_SHM_WAKE_PEER"

// wakeSetup is what both processes share: a page with a word each (the
// parent's at 0, the child's at 64), an eventfd each, a socket pair.
type wakeSetup struct {
	mem        []byte
	mine, peer *uint32
	myBell     *os.File
	peerBell   *os.File
	sock       net.Conn
}

// wait returns once this side's word is want. Every post rings once, and
// the eventfd and socket waits take exactly that one ring, so nothing is
// left over to make a later wait return early (or fill the socket).
func (w *wakeSetup) wait(mode string, want uint32) {
	w.waitFor(mode, func(v uint32) bool { return v == want })
}

func (w *wakeSetup) waitFor(mode string, ok func(uint32) bool) {
	var b [8]byte
	for {
		switch mode {
		case "spin":
			if ok(atomic.LoadUint32(w.mine)) {
				return
			}
		case "futex":
			v := atomic.LoadUint32(w.mine)
			if ok(v) {
				return
			}
			unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w.mine)), 0 /* FUTEX_WAIT */, uintptr(v), 0, 0, 0)
		case "eventfd":
			w.myBell.Read(b[:])
			if ok(atomic.LoadUint32(w.mine)) {
				return
			}
		case "socket":
			w.sock.Read(b[:1])
			if ok(atomic.LoadUint32(w.mine)) {
				return
			}
		}
	}
}

func (w *wakeSetup) post(mode string, v uint32) {
	atomic.StoreUint32(w.peer, v)
	switch mode {
	case "futex":
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w.peer)), 1 /* FUTEX_WAKE */, 1, 0, 0, 0)
	case "eventfd":
		unix.Write(int(w.peerBell.Fd()), one)
	case "socket":
		w.sock.Write(one[:1])
	}
}

func benchWake(b *testing.B, mode string) {
	mfd, err := unix.MemfdCreate("wake", unix.MFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	unix.Ftruncate(mfd, 4096)
	mem, err := unix.Mmap(mfd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	var files []*os.File
	newFile := func(fd int, name string) *os.File {
		f := os.NewFile(uintptr(fd), name)
		files = append(files, f)
		return f
	}
	// Only this side's own ends go into this process's poller: the
	// child's eventfd and socket end are created blocking, so that
	// os.NewFile leaves them out of it, as the transport does.
	e1, _ := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	e2, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	sp, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	mf, parentBell, childBell := newFile(mfd, "mem"), newFile(e1, "bell1"), newFile(e2, "bell2")
	s0, s1 := newFile(sp[0], "s0"), newFile(sp[1], "s1")
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	sock, err := net.FileConn(s0)
	if err != nil {
		b.Fatal(err)
	}
	defer sock.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWakePeer$")
	cmd.Env = append(os.Environ(), envWakePeer+"="+mode)
	cmd.ExtraFiles = []*os.File{mf, parentBell, childBell, s1}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	w := &wakeSetup{mem: mem, mine: (*uint32)(unsafe.Pointer(&mem[0])), peer: (*uint32)(unsafe.Pointer(&mem[64])),
		myBell: parentBell, peerBell: childBell, sock: sock}
	w.wait("spin", 1) // the child is up
	b.ResetTimer()
	for i := range b.N {
		w.post(mode, uint32(2*i+2))
		w.wait(mode, uint32(2*i+3))
	}
	b.StopTimer()
	w.post(mode, ^uint32(0)) // stop
}

// TestWakePeer is BenchmarkWake's peer process.
func TestWakePeer(t *testing.T) {
	mode := os.Getenv(envWakePeer)
	if mode == "" {
		t.Skip("only runs as BenchmarkWake's peer")
	}
	mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(5, true) // this side's eventfd and socket: pollable
	unix.SetNonblock(6, true)
	sock, err := net.FileConn(os.NewFile(6, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	w := &wakeSetup{mem: mem, mine: (*uint32)(unsafe.Pointer(&mem[64])), peer: (*uint32)(unsafe.Pointer(&mem[0])),
		myBell: os.NewFile(5, "bell2"), peerBell: os.NewFile(4, "bell1"), sock: sock}
	w.post("spin", 1)
	for {
		w.waitFor(mode, func(v uint32) bool { return v%2 == 0 && v != 0 || v == ^uint32(0) })
		v := atomic.LoadUint32(w.mine)
		if v == ^uint32(0) {
			return
		}
		atomic.StoreUint32(w.mine, 0)
		w.post(mode, v+1)
	}
}
