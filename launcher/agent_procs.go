// This file holds the agent's seam for ranks that are not processes: the
// cluster simulator (package simcluster) runs many agents in one process,
// whose ranks are goroutines that it starts, signals and ends through
// Procs. Everything else in the agent (the control protocol, the PMI and
// KV servers, output relay, fences, the launch tree) is the same code that
// runs on a real host.

package launcher

import (
	"net"
	"syscall"
	"time"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
)

// Procs starts and signals an agent's ranks when they are not real
// processes (AgentOptions.Procs). An agent with Procs forks nothing,
// reaps nothing, installs no signal handlers and sweeps neither orphans
// nor /dev/shm: it may share its process with other agents.
type Procs interface {
	// Start starts one rank. The pid it returns names the rank to Signal
	// and must be unique among the agent's live ranks. Neither Start nor
	// Signal may call r.Exit: the rank ends later, from another goroutine.
	Start(r ProcRank) (pid int, err error)
	// Signal delivers sig to the rank with pid; a rank ends (r.Exit) on
	// the signals that end a process by default.
	Signal(pid int, sig syscall.Signal)
}

// ProcRank is a rank that Procs starts: what a real rank's fork and exec
// would get, and the agent's ends of its pipes.
type ProcRank struct {
	Rank int
	Path string   // the resolved program
	Argv []string // its arguments, Argv[0] included
	Env  []string // its environment, as a process would get it
	Dir  string
	// PMI is the rank's end of its PMI-1 connection to the agent (a real
	// rank's descriptor 3); nil when the agent serves no PMI.
	PMI net.Conn
	// Output relays what the rank writes to its stdout (1) or stderr (2).
	Output func(stream int, data []byte)
	// Exit reports the rank's end once: its exit code, or the signal
	// that killed it (code -1).
	Exit func(code int, sig syscall.Signal)
}

// simulated says the agent's ranks are not processes.
func (a *agent) simulated() bool { return a.o.Procs != nil }

// startProc starts a rank through Procs, numbered id in the job's
// frames, whose PMI-1 connection pmi serves (nil: none). The caller
// registers it.
func (a *agent) startProc(s control.RankSpec, id int, pmi *pmiState, path string, argv, environ []string, dir string) (*rankProc, error) {
	p := &rankProc{rank: id}
	var mine, theirs net.Conn
	if pmi != nil {
		mine, theirs = net.Pipe()
	}
	pid, err := a.o.Procs.Start(ProcRank{
		Rank: id, Path: path, Argv: argv, Env: environ, Dir: dir, PMI: theirs,
		Output: func(stream int, data []byte) {
			if output.Stream(stream) == output.Stderr {
				p.tail.write(data)
			}
			a.w.SendOutput(control.Output{Rank: id, Stream: uint8(stream), Time: time.Now(), Data: data})
		},
		Exit: func(code int, sig syscall.Signal) { a.post(nil, procEnded{p, code, sig}) },
	})
	if err != nil {
		if mine != nil {
			mine.Close()
			theirs.Close()
		}
		return nil, err
	}
	p.pid, p.start = pid, time.Now()
	if mine != nil {
		pmi.serveConn(mine, s.Rank)
	}
	return p, nil
}
