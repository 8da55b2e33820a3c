// This file holds the agent's end of a rank: reaping ranks and reporting
// how they ended, signalling and killing them, and clearing away the
// orphans, servers and shared-memory files they leave.

package launcher

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/launcher/control"
)

// readerDrain bounds how long an exited rank's output pipes are read after
// its process group was killed (an escaped grandchild may hold them open).
const readerDrain = 2 * time.Second

// reap collects every child that has ended (SIGCHLD): ranks, whose ends
// it handles, and orphans re-parented to the agent.
func (a *agent) reap() {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if pid <= 0 || err != nil {
			return
		}
		p := a.byPID[pid]
		if p == nil {
			continue // an orphan: reaped, nothing to report
		}
		e := rankEnded{pid: pid, maxRSS: ru.Maxrss}
		// What the rank left behind in its process group goes with it.
		if unix.Kill(-pid, unix.SIGKILL) == nil {
			a.leftovers = true // something of the rank's still ran
		}
		switch {
		case ws.Exited():
			e.code = ws.ExitStatus()
		case ws.Signaled():
			e.code, e.sig = -1, ws.Signal()
			if e.sig == unix.SIGKILL {
				e.ooms = oomKills() - p.ooms
			}
		}
		a.onRankEnded(e)
	}
}

// onProcEnded is a Procs rank's end, as reap is a process's.
func (a *agent) onProcEnded(e procEnded) {
	if a.byPID[e.p.pid] != e.p {
		return // reported already
	}
	a.onRankEnded(rankEnded{pid: e.p.pid, code: e.code, sig: e.sig})
}

// onRankEnded forgets an ended rank, and has its end reported once the
// rest of its output is relayed (finish).
func (a *agent) onRankEnded(e rankEnded) {
	p := a.byPID[e.pid]
	if p == nil {
		return
	}
	x := a.retire(p)
	x.Code, x.MaxRSS, x.OOMKills = e.code, e.maxRSS, e.ooms
	if e.sig != 0 {
		x.Code, x.Signal = -1, int(e.sig)
	}
	a.finishing++
	go a.finish(p, x, a.pmi, a.pmix)
}

// retire forgets an ended rank (its pid, its stdin queue) and returns the
// start of its report.
func (a *agent) retire(p *rankProc) control.Exited {
	delete(a.byPID, p.pid)
	if ch := a.stdin[p.rank]; ch != nil {
		delete(a.stdin, p.rank)
		close(ch)
	}
	return control.Exited{Generation: a.gen, Rank: p.rank, PID: p.pid, Start: p.start, End: time.Now(),
		Stopped: p.stopped || a.stopped}
}

// oomKills reads the kernel's count of OOM kills (/proc/vmstat oom_kill).
func oomKills() int { return procfs.Proc.VMStat("oom_kill") }

// finish waits for an ended rank's output to be relayed, adds what its
// rendezvous servers know of its end (pmi's, and px's, of its
// generation), and hands its report to the loop (rankFinished).
func (a *agent) finish(p *rankProc, e control.Exited, pmi *pmiState, px *pmixState) {
	done := make(chan struct{})
	go func() { p.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(readerDrain):
		// An escaped grandchild holds the pipes: stop reading them.
		for _, f := range p.outR {
			f.Close()
		}
		<-done
	}
	for _, f := range p.outR {
		f.Close()
	}
	e.StderrTail = p.tail.String()
	a.printEnded(p.rank)
	if pmi != nil && pmi.kv != nil && p.job == 0 {
		if prog, ok := pmi.kv.Final(p.rank); ok {
			e.Coll, _ = json.Marshal(prog)
		}
	}
	early := e.Code == 0 && e.Signal == 0 && px != nil && px.gen == e.Generation && px.leftEarly(px.nspaceOf(p.job), p.mpiRank)
	a.post(nil, rankFinished{e, early})
}

// onFinished reports a rank's end, and the generation's once it was the
// last; a rank of an earlier generation is not reported.
func (a *agent) onFinished(e rankFinished) {
	a.finishing--
	if e.Generation != a.gen {
		return
	}
	if e.early {
		a.send(control.TypeAbort, control.Abort{Generation: e.Generation, Rank: e.Rank, Early: true,
			Msg: "left before MPI_Finalize (it called PMIx_Init and exited without PMIx_Finalize)"})
	}
	a.send(control.TypeExited, e.Exited)
	a.live--
	if a.live == 0 {
		a.done()
	}
}

// done reports the generation finished, once its leftovers are gone.
func (a *agent) done() {
	a.disarmKill()
	a.pmix.close() // before the orphan sweep, which would take it for one
	a.pmix = nil
	a.closeDyn()
	if !a.simulated() {
		killOrphans(time.Second, a.leftovers)
		a.shm.sweep()
	}
	a.leftovers = false
	a.send(control.TypeDone, control.Done{Generation: a.gen, MaxRSS: peakRSS(), Launches: a.launches})
}

// signalAll sends sig to every rank, in the order of their pids: to a
// process's group, and SIGCONT after it when sig asks the rank to end.
func (a *agent) signalAll(sig syscall.Signal) {
	for _, pid := range slices.Sorted(maps.Keys(a.byPID)) {
		if a.simulated() {
			a.o.Procs.Signal(pid, sig)
			continue
		}
		unix.Kill(-pid, sig)
		if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
			unix.Kill(-pid, unix.SIGCONT) // a stopped rank must see it
		}
	}
}

// kill stops every rank: SIGTERM now, SIGKILL after grace (killDue).
func (a *agent) kill(grace time.Duration) {
	a.stopped = true
	for pid, p := range a.byPID {
		p.stopped = true
		if a.simulated() {
			continue
		}
		// MPI libraries leave their shared-memory segments behind when
		// killed (Open MPI's vader, MPICH's and UCX's): note what the
		// ranks have mapped, to remove what they made once they are gone.
		a.shm.note(pid)
	}
	if grace <= 0 {
		a.signalAll(unix.SIGKILL)
		return
	}
	a.signalAll(unix.SIGTERM)
	a.armKill(grace)
}

// onKillDue ends the grace period of a kill: SIGKILL.
func (a *agent) onKillDue() {
	a.killT, a.killC = nil, nil
	a.signalAll(unix.SIGKILL)
}

// closeServers closes the generation's rendezvous servers, the spawned
// jobs', and the directory of their sockets.
func (a *agent) closeServers() {
	a.pmi.close()
	a.pmi = nil
	a.pmix.close()
	a.pmix = nil
	a.endDyn()
	a.awaitPrep()
	if a.sockDir != "" {
		os.RemoveAll(a.sockDir)
	}
}

// killOrphans kills and reaps every remaining child of the agent: ranks'
// descendants that escaped their process group and were re-parented here.
// careful (process groups were just killed) makes it look a few more times
// after finding none: a process that was forking as its group died may
// arrive a moment later.
func killOrphans(limit time.Duration, careful bool) {
	self := os.Getpid()
	deadline := time.Now().Add(limit)
	quiet := 0
	for {
		kids := procfs.Proc.Children(self)
		if len(kids) == 0 {
			// A process that was forking while its group was killed may
			// still arrive here: look twice more before calling it done.
			if quiet++; !careful || quiet >= 3 || time.Now().After(deadline) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		quiet = 0
		for _, pid := range kids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
		for {
			var ws unix.WaitStatus
			if pid, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return
		}
	}
}
