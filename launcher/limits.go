package launcher

import (
	"fmt"
	"math"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/plural"
)

// The settings that raise the rendezvous budgets, named in the errors of
// puts they refuse.
const (
	RankBudgetSetting = "--kv-rank-budget"
	JobBudgetSetting  = "--kv-job-budget"
)

// The descriptors an agent holds, counted from its spawn code
// (agent.start): what a running rank keeps open there, and the agent's own.
const (
	// filesPerRank: the read ends of the rank's stdout and stderr pipes,
	// the agent's end of its PMI-1 socketpair, and the connection a Go
	// rank opens to the agent's KV socket.
	filesPerRank = 4
	// filesStdin: the write end of the stdin pipe of the rank that reads
	// gorun's stdin.
	filesStdin = 1
	// filesAgent: the agent's own, whatever its ranks: its standard
	// streams and control channel, the Go runtime's poller, the KV
	// listener, the PMIx plugin's connection and pipes, a file under /proc
	// being read, and the ranks being forked (maxForkers at a time, each
	// with the child's ends of its pipes and socketpair, the duplicate
	// net.FileConn makes, and exec's status pipe: 8), with room to spare.
	filesAgent = 64
)

// The head's descriptors: its own (standard streams, the poller, the
// output files, the rendezvous, a margin) and, per agent it starts
// itself, the connection (an SSH or connect-back socket, or a local
// agent's three pipes: filesPerDirect counts the most).
const (
	filesHead      = 64
	filesPerDirect = 3
)

// checkHeadFiles refuses, before any agent starts, a job whose agents the
// head could not all hold connections to: direct is how many it starts
// itself (every host without a launch tree, K with one), limit its
// descriptor limit (0: unknown, not checked).
func checkHeadFiles(hosts, direct, limit int) error {
	need := filesHead + direct*filesPerDirect
	if limit <= 0 || need <= limit {
		return nil
	}
	return fmt.Errorf("%w: %d hosts, each with a connection from gorun (--launch-fanout 0), need about %d open files in gorun, more than its limit of %d (ulimit -n): use the launch tree (--launch-fanout auto, gorun's default, or K: gorun then holds K connections) or raise the limit (ulimit -n, the hard limit ulimit -Hn bounds it)",
		ErrUsage, hosts, need, limit)
}

// agentFiles is how many descriptors an agent needs to run ranks ranks,
// stdin of which read gorun's stdin.
func agentFiles(ranks, stdin int) int {
	return filesAgent + ranks*filesPerRank + stdin*filesStdin
}

// openFileLimit returns the most descriptors this process may hold. Go's
// runtime raises the soft RLIMIT_NOFILE to the hard limit (less one) as
// the program starts, and gives the processes it starts the original soft
// limit back (programs that use select(2) need it). If the limit is lower
// now (lowered from outside with prlimit), it is raised again the same
// way, past the syscall package, so that ranks still get the original.
func openFileLimit() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Max > 0 && lim.Cur < lim.Max-1 {
		raised := unix.Rlimit{Cur: lim.Max - 1, Max: lim.Max}
		_, _, errno := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&raised)), 0, 0, 0)
		if errno == 0 {
			lim = raised
		}
	}
	return int(min(lim.Cur, math.MaxInt32))
}

// checkFiles refuses, before any rank starts, a plan whose ranks some
// host's agent could not hold open: it would start ranks until its
// descriptors ran out, and the job would fail half started. The agents
// said their limit in their hello (an older agent says none, and is not
// checked).
func (h *head) checkFiles() error {
	var over []string
	for i, n := range h.plan.Nodes {
		a := h.agents[i]
		if a == nil || a.hello.MaxFiles <= 0 {
			continue
		}
		stdin := 0
		if r := h.o.StdinRank; r >= 0 && r < len(h.plan.Ranks) && h.plan.Ranks[r].Node == i {
			stdin = 1
		}
		limit := a.hello.MaxFiles
		need := agentFiles(len(n.Ranks), stdin)
		if need <= limit {
			continue
		}
		fit := max((limit-filesAgent-stdin*filesStdin)/filesPerRank, 0)
		verb := "need"
		if len(n.Ranks) == 1 {
			verb = "needs"
		}
		over = append(over, fmt.Sprintf("%s: %s %s %d open files in gorun's agent there, more than its limit of %d (ulimit -n); at most %d ranks fit",
			n.Host.Name, plural.Of(len(n.Ranks), "rank"), verb, need, limit, fit))
	}
	if len(over) == 0 {
		return nil
	}
	if len(over) > 3 {
		over = append(over[:3], fmt.Sprintf("and %d more hosts", len(over)-3))
	}
	return fmt.Errorf("%w: %s. Raise the limit where the agents run (the hard limit, ulimit -Hn, bounds it: nofile in /etc/security/limits.conf, LimitNOFILE= for a systemd service, the resource manager's own limits), or spread the ranks over more hosts",
		ErrUsage, strings.Join(over, "; "))
}
