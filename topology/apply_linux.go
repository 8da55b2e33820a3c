package topology

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Memory policy modes of set_mempolicy(2).
const (
	mpolDefault = 0
	mpolBind    = 2
)

// maxNUMANodes bounds the node mask passed to the kernel.
const maxNUMANodes = 1024

// Apply binds the calling OS thread to cpus (sched_setaffinity) and its
// memory to the NUMA nodes mems (set_mempolicy MPOL_BIND); an empty set or
// list leaves that part alone. Both are inherited by children and kept
// across execve, which is how gorun binds a rank: Go cannot act between
// fork and exec, so the rank starts as gorun itself, binds, then execs
// the program ([BindExec]). The caller must hold the thread
// (runtime.LockOSThread) until it execs.
func Apply(cpus CPUSet, mems []int) error {
	if !cpus.IsEmpty() {
		var set unix.CPUSet
		for _, c := range cpus.CPUs() {
			if c >= len(set)*64 {
				return fmt.Errorf("bind to CPU %d: beyond the %d CPUs a mask holds", c, len(set)*64)
			}
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("bind to CPUs %s: %w", cpus, err)
		}
	}
	if len(mems) > 0 {
		var mask [maxNUMANodes / 64]uint64
		for _, n := range mems {
			if n < 0 || n >= maxNUMANodes {
				return fmt.Errorf("bind memory to NUMA node %d: out of range", n)
			}
			mask[n/64] |= 1 << (n % 64)
		}
		// maxnode counts bits; the kernel reads maxnode-1 of them.
		_, _, errno := unix.Syscall(unix.SYS_SET_MEMPOLICY, mpolBind, uintptr(unsafe.Pointer(&mask[0])), maxNUMANodes+1)
		if errno != 0 {
			return fmt.Errorf("bind memory to NUMA nodes %v: %w", mems, errno)
		}
	}
	return nil
}

// BindExec applies a binding to the calling thread and replaces the
// process with path (argv, env). It returns only on error.
func BindExec(cpus CPUSet, mems []int, path string, argv, env []string) error {
	runtime.LockOSThread()
	if err := Apply(cpus, mems); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err := unix.Exec(path, argv, env)
	runtime.UnlockOSThread()
	return fmt.Errorf("exec %s: %w", path, err)
}

// MemPolicy returns the calling thread's memory policy mode and nodes
// (get_mempolicy), for checks from inside a rank.
func MemPolicy() (mode int, nodes []int, err error) {
	var mask [maxNUMANodes / 64]uint64
	var m int32
	_, _, errno := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&mask[0])), maxNUMANodes+1, 0, 0, 0)
	if errno != 0 {
		return 0, nil, fmt.Errorf("get_mempolicy: %w", errno)
	}
	for i := 0; i < maxNUMANodes; i++ {
		if mask[i/64]&(1<<(i%64)) != 0 {
			nodes = append(nodes, i)
		}
	}
	return int(m), nodes, nil
}
