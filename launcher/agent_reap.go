// This file holds the agent's end of a rank: reaping ranks and reporting
// how they ended, signalling and killing them, and clearing away the
// orphans and shared-memory files they leave.

package launcher

import (
	"encoding/json"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/launcher/control"
)

// readerDrain bounds how long an exited rank's output pipes are read after
// its process group was killed (an escaped grandchild may hold them open).
const readerDrain = 2 * time.Second

// reap collects every child that has ended: ranks, and orphans re-parented
// to the agent.
func (a *agent) reap() {
	a.mu.Lock()
	defer a.mu.Unlock()
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
		e := a.retire(p)
		e.MaxRSS = ru.Maxrss
		// What the rank left behind in its process group goes with it.
		if unix.Kill(-pid, unix.SIGKILL) == nil {
			a.leftovers = true // something of the rank's still ran
		}
		switch {
		case ws.Exited():
			e.Code = ws.ExitStatus()
		case ws.Signaled():
			e.Code, e.Signal = -1, int(ws.Signal())
			if ws.Signal() == unix.SIGKILL {
				e.OOMKills = oomKills() - p.ooms
			}
		}
		go a.finish(p, e)
	}
}

// retire forgets an ended rank (its pid, its stdin queue) and returns the
// start of its report. Called with a.mu held.
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

// finish reports a rank's end after its output has been relayed.
func (a *agent) finish(p *rankProc, e control.Exited) {
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
	a.mu.Lock()
	px, pmi := a.pmix, a.pmi
	a.mu.Unlock()
	if pmi != nil && pmi.kv != nil && p.job == 0 {
		if prog, ok := pmi.kv.Final(p.rank); ok {
			e.Coll, _ = json.Marshal(prog)
		}
	}
	early := e.Code == 0 && e.Signal == 0 && px != nil && px.gen == e.Generation && px.leftEarly(px.nspaceOf(p.job), p.mpiRank)
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Generation != a.gen {
		return
	}
	if early {
		a.w.Send(control.TypeAbort, control.Abort{Generation: e.Generation, Rank: p.rank, Early: true,
			Msg: "left before MPI_Finalize (it called PMIx_Init and exited without PMIx_Finalize)"})
	}
	a.w.Send(control.TypeExited, e)
	a.live--
	if a.live == 0 {
		a.done()
	}
}

// done reports the generation finished, once its leftovers are gone.
func (a *agent) done() {
	if a.killT != nil {
		a.killT.Stop()
	}
	a.pmix.close() // before the orphan sweep, which would take it for one
	a.pmix = nil
	a.closeDyn()
	if !a.simulated() {
		killOrphans(time.Second, a.leftovers)
		a.shm.sweep()
	}
	a.leftovers = false
	a.w.Send(control.TypeDone, control.Done{Generation: a.gen, MaxRSS: peakRSS(), Launches: a.launches})
}

// signalAll sends sig to every rank's process group, and SIGCONT after it
// when sig asks the rank to end.
func (a *agent) signalAll(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.simulated() {
		a.signalProcs(sig)
		return
	}
	for pid := range a.byPID {
		unix.Kill(-pid, sig)
		if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
			unix.Kill(-pid, unix.SIGCONT) // a stopped rank must see it
		}
	}
}

// kill stops every rank: SIGTERM now, SIGKILL after grace.
func (a *agent) kill(grace time.Duration) {
	a.mu.Lock()
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
	a.mu.Unlock()
	if grace <= 0 {
		a.signalAll(unix.SIGKILL)
		return
	}
	a.signalAll(unix.SIGTERM)
	a.mu.Lock()
	if a.killT != nil {
		a.killT.Stop()
	}
	a.killT = time.AfterFunc(grace, func() { a.signalAll(unix.SIGKILL) })
	a.mu.Unlock()
}

// shutdown stops every rank and orphan, waits for them, and returns.
// Lower agents lose their connection and do the same on their hosts.
func (a *agent) shutdown(grace time.Duration) error {
	a.dropKids()
	defer func() {
		a.mu.Lock()
		a.pmi.close()
		a.pmix.close()
		a.pmix = nil
		a.endDyn()
		if a.sockDir != "" {
			os.RemoveAll(a.sockDir)
		}
		a.mu.Unlock()
	}()
	a.mu.Lock()
	n := len(a.byPID)
	careful := n > 0 || a.leftovers
	a.mu.Unlock()
	if n > 0 {
		a.kill(grace)
		deadline := time.Now().Add(grace + 2*time.Second)
		for time.Now().Before(deadline) {
			if !a.simulated() {
				a.reap()
			}
			a.mu.Lock()
			n = len(a.byPID)
			a.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if a.simulated() {
		return nil
	}
	killOrphans(2*time.Second, careful)
	a.mu.Lock()
	a.shm.sweep()
	a.mu.Unlock()
	return nil
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
