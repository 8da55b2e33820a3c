package launcher

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/procfs"
)

// fdsPerRank is how many descriptors the agent holds for each running
// rank: the read ends of its stdout and stderr pipes, its PMI socket and
// the write end of its stdin pipe. fdsPerForker is how many more each
// forking goroutine holds while it forks (the child's ends).
const (
	fdsPerRank   = 4
	fdsPerForker = 4
)

// fdMinTable is the smallest descriptor table Linux makes (BITS_PER_LONG
// entries), and each growth at least doubles it.
const fdMinTable = 64

// growForLaunch grows the table ahead of a launch of n ranks, in the
// background, when the launch's descriptors would not fit (growFDTable).
// A launch whose room is below fdMinTable grows the table once at most,
// which growing ahead would not spare: it reads nothing of /proc.
func growForLaunch(n int) {
	room := fdRoom(n)
	if room < fdMinTable {
		return
	}
	if target, ok := fdTarget(room); ok {
		go growFDTable(target)
	}
}

// fdRoom is how many descriptors a launch of n ranks holds at most.
func fdRoom(n int) int { return fdsPerRank*n + fdsPerForker*min(n, maxForkers) }

// fdTarget returns the descriptor number that this process's table must
// hold for room more descriptors to open beside those open now, and false
// when the table holds them already (or cannot be read). New descriptors
// take the lowest free numbers, so what counts is how many are open, not
// the highest: one inherited at 251 leaves the 240 below it free.
func fdTarget(room int) (target int, ok bool) {
	size, err := strconv.Atoi(procfs.Proc.StatusField(os.Getpid(), "FDSize"))
	open := procfs.Proc.FDCount(os.Getpid())
	if err != nil || size <= 0 || open < 0 || open+room <= size {
		return 0, false
	}
	return open + room, true
}

// growFDTable grows this process's descriptor table in one step to hold
// descriptor number target, by duplicating a descriptor there and closing
// the copy. It reports whether it did.
//
// Linux grows a descriptor table by doubling it, and in a multi-threaded
// process (every Go program) each growth waits for an RCU grace period
// (expand_fdtable's synchronize_rcu): 8-15 ms on a 2-vCPU VM, during which
// every allocation of a descriptor beyond the old size waits too. Forking
// 64 ranks, whose pipes and sockets the agent keeps open, grew the table
// three times (from 64 entries to 128, 256 and 512). Grown once, from a
// goroutine started as the fork begins, the one wait overlaps the forks
// of the first ranks, which fit in the table as it is.
func growFDTable(target int) bool {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return false
	}
	defer null.Close()
	fd, err := unix.FcntlInt(null.Fd(), unix.F_DUPFD_CLOEXEC, target)
	if err != nil {
		// Target beyond RLIMIT_NOFILE: the table grows as the ranks
		// need, and a fork fails as it would have.
		return false
	}
	unix.Close(fd)
	return true
}
