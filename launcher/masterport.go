package launcher

// MASTER_PORT: every rank of a job sees the same MASTER_ADDR and
// MASTER_PORT, as under torchrun, and rank 0's program (torch's TCPStore,
// or anything else) binds MASTER_PORT itself. The agent on each host
// chooses a free port at its hello and holds it, bound but not listening,
// until the launch: the head takes the first host's for MASTER_PORT, and
// every agent lets its port go just before its ranks start, so that rank
// 0 can bind it and nothing else took it in between. Nothing of gorun's
// listens there: a connection before rank 0 listens is refused, as under
// torchrun's c10d rendezvous, whatever the program.
//
// (Before 2026-12, the agent listened on MASTER_PORT itself from the hello
// on and passed each connection on to rank 0, which was told another
// port: torch 1.13's store client, refused, sleeps a whole second before it
// tries again, and the gate spared the ranks that second. It broke the
// contract that every rank sees the same MASTER_PORT, on which programs
// that open a second store at MASTER_PORT+1 rely, and each waiting
// connection cost the agent CPU until it gave up: the contract won.)

import (
	"math/rand/v2"
	"sync"
	"syscall"

	"github.com/gorun/gorun/internal/procfs"
)

// heldPort is a TCP port that this process holds: bound on every
// interface, without SO_REUSEADDR and without listening, so that no other
// socket can bind it (not even one with SO_REUSEADDR, as torch's store
// sets) and a connection to it is refused.
type heldPort struct {
	port int
	fd   int
	once sync.Once
}

// holdFreePort holds a TCP port that is free now and lies outside the
// kernel's ephemeral range, so that no outgoing connection takes it after
// it is let go. It never takes a fixed default; nil if 64 tries found none.
func holdFreePort() *heldPort {
	lo, hi := 32768, 60999
	if l, h, ok := procfs.Proc.PortRange(); ok {
		lo, hi = l, h
	}
	pick := func() int {
		if lo > 11024 {
			return 10000 + rand.IntN(lo-10000)
		}
		if hi < 64000 {
			return hi + 1 + rand.IntN(65535-hi)
		}
		return 1024 + rand.IntN(64511)
	}
	for range 64 {
		p := pick()
		if fd, err := bindPort(p); err == nil {
			return &heldPort{port: p, fd: fd}
		}
	}
	return nil
}

// bindPort binds a TCP socket to port p on every interface, IPv6 with
// IPv4 mapped (as torch's store listens), or IPv4 alone where the host has
// no IPv6; it does not listen.
func bindPort(p int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err == nil {
		if err = syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrInet6{Port: p})
		}
		if err == nil {
			return fd, nil
		}
		syscall.Close(fd)
		if err != syscall.EAFNOSUPPORT && err != syscall.EADDRNOTAVAIL {
			return -1, err
		}
	} else if err != syscall.EAFNOSUPPORT {
		return -1, err
	}
	if fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0); err != nil {
		return -1, err
	}
	if err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: p}); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// release lets the port go. It may be called again, and on nil.
func (h *heldPort) release() {
	if h != nil {
		h.once.Do(func() { syscall.Close(h.fd) })
	}
}
