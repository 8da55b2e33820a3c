package testcluster

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is what a fixture's teardown needs to know of a process.
type Proc struct {
	// Pid is its pid.
	Pid int
	// Start is its start time, in clock ticks since boot (field 22 of
	// /proc/PID/stat): a pid and its start time name one process, where a
	// pid alone may be reused.
	Start uint64
	// Zombie reports whether it has ended (state Z or X).
	Zombie bool
	// NS is the inode of its namespace of the kind ReadProc was asked for
	// (net, uts, ...), 0 if unknown (a zombie has none).
	NS uint64
}

// ReadProc reads /proc/PID/stat and the inode of pid's namespace of kind
// ns (net, uts, mnt). ok is false when pid is gone.
func ReadProc(pid int, ns string) (p Proc, ok bool) {
	p.Pid = pid
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return p, false
	}
	// The command name, in parentheses, may hold spaces: the fields that
	// follow start after the last ')'. State is field 3, starttime 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return p, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return p, false
	}
	p.Zombie = f[0] == "Z" || f[0] == "X"
	p.Start, _ = strconv.ParseUint(f[19], 10, 64)
	p.NS = NSInode(pid, ns)
	return p, true
}

// NSInode returns the inode of pid's namespace of kind (net, uts, mnt), 0
// if unknown.
func NSInode(pid int, kind string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st) != nil {
		return 0
	}
	return st.Ino
}

// Procs returns every process but this one, with its namespace of kind ns
// (see ReadProc).
func Procs(ns string) []Proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var procs []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if p, ok := ReadProc(pid, ns); ok {
			procs = append(procs, p)
		}
	}
	return procs
}

// Live returns the pids of the processes of procs that are not zombies and
// are in a trusted namespace or own (one of the fixture's recorded
// processes).
func Live(procs []Proc, trusted map[uint64]bool, own func(Proc) bool) []int {
	var pids []int
	for _, p := range procs {
		if !p.Zombie && (trusted[p.NS] || own(p)) {
			pids = append(pids, p.Pid)
		}
	}
	return pids
}

// KillAll sends SIGKILL to a cluster's processes until none is left
// (zombies count as gone) or timeout passes: those that Live finds in the
// namespaces of kind ns that trust returns (trusted, and of those the ones
// held open by this process), or that own recognises. A namespace left
// empty is freed, and its inode may be given to a new one: it is trusted no
// more, unless held open.
func KillAll(ns string, timeout time.Duration, trust func([]Proc) (trusted, held map[uint64]bool), own func(Proc) bool) error {
	procs := Procs(ns)
	trusted, held := trust(procs)
	deadline := time.Now().Add(timeout)
	for {
		pids := Live(procs, trusted, own)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v outlived SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
		procs = Procs(ns)
		live := map[uint64]bool{}
		for _, p := range procs {
			if !p.Zombie {
				live[p.NS] = true
			}
		}
		for n := range trusted {
			if !live[n] && !held[n] {
				delete(trusted, n)
			}
		}
	}
}
