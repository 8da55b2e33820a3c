package launcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gorun/gorun/stacks"
)

// The --on-hang choices.
const (
	OnHangStop   = "stop"   // print the verdict and stop the job (ExitHang)
	OnHangReport = "report" // print the verdict and let the job run
)

// hangDetected: no rank made progress for --hang-timeout.
type hangDetected struct {
	fromHead
	verdict *stacks.Verdict
	idle    time.Duration
}

// progressMark is what the hang watch compares between two looks at the
// job: any change in output, rendezvous calls, collective calls or the
// set of running ranks is progress.
type progressMark struct {
	output  int64 // the latest output, Unix ns
	ops     uint64
	calls   uint64
	running int
	cpu     map[int]float64
}

// hangPeriod is how often the watch looks at a job with --hang-timeout d.
func hangPeriod(d time.Duration) time.Duration {
	return min(max(d/4, 100*time.Millisecond), 5*time.Second)
}

// watchHang reports a job in which no rank has made progress for
// --hang-timeout: no output, no rendezvous or collective call, and
// either no CPU time used or the same stacks in two samples a little
// apart (a rank spinning in MPI_Barrier uses CPU without progress). It
// sends hangDetected, and after a report waits another timeout.
func (h *head) watchHang(ctx context.Context) {
	d := h.o.HangTimeout
	t := time.NewTicker(hangPeriod(d))
	defer t.Stop()
	last := time.Now()
	var prev *progressMark
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.done:
			return
		case <-t.C:
		}
		st, err := h.collectStatus(ctx, 5*time.Second)
		if err != nil {
			continue // not started yet, or ending
		}
		m := markOf(st, h)
		spinning := false
		if prev == nil || m.output != prev.output || m.ops != prev.ops || m.calls != prev.calls || m.running != prev.running {
			last = time.Now()
		} else {
			for r, c := range m.cpu {
				if c > prev.cpu[r]+0.01 {
					spinning = true
				}
			}
		}
		prev = m
		if time.Since(last) < d {
			continue
		}
		v, err := h.collectStacks(ctx, stacksTimeout, false)
		if err != nil {
			continue
		}
		if spinning {
			// CPU time moves: the job is hung only if its stacks stay.
			select {
			case <-time.After(min(max(d/4, 200*time.Millisecond), 3*time.Second)):
			case <-ctx.Done():
				return
			}
			v2, err := h.collectStacks(ctx, stacksTimeout, false)
			if err != nil {
				continue
			}
			if !sameStacks(v, v2) {
				last = time.Now()
				continue
			}
			v = v2
		}
		select {
		case h.events <- hangDetected{verdict: v, idle: time.Since(last)}:
		case <-ctx.Done():
			return
		case <-h.done:
			return
		}
		last = time.Now()
	}
}

// markOf sums up a status for the hang watch.
func markOf(st *JobStatus, h *head) *progressMark {
	m := &progressMark{cpu: map[int]float64{}}
	for r, rs := range st.Ranks {
		if t := h.live[r].lastOut.Load(); t > m.output {
			m.output = t
		}
		m.ops += rs.Ops
		m.calls += rs.Calls
		if rs.State != "exited" && rs.State != "unknown" {
			m.running++
			m.cpu[r] = rs.CPU
		}
	}
	return m
}

// sameStacks reports whether two verdicts found every rank in the same
// place.
func sameStacks(a, b *stacks.Verdict) bool {
	if len(a.Ranks) != len(b.Ranks) {
		return false
	}
	for i := range a.Ranks {
		if a.Ranks[i].Rank != b.Ranks[i].Rank || a.Ranks[i].Signature() != b.Ranks[i].Signature() {
			return false
		}
	}
	return true
}

// onHang prints the verdict and, unless --on-hang report, stops the job
// with ExitHang.
func (g *genState) onHang(e hangDetected) {
	h := g.h
	if g.stopping {
		return
	}
	h.hang = e.verdict
	var b strings.Builder
	fmt.Fprintf(&b, "gorun: job %s is hung: no rank made progress for %v (--hang-timeout %v)\n", h.jobID, e.idle.Round(100*time.Millisecond), h.o.HangTimeout)
	e.verdict.WriteText(&b, false)
	h.notef("%s", b.String())
	if h.o.OnHang == OnHangReport {
		return
	}
	if g.end(result{reason: reasonHang}) {
		g.stop(h.o.Grace)
	}
}

// timeoutVerdict collects the stacks of a job whose --timeout expired,
// before it is stopped, and prints them.
func (h *head) timeoutVerdict(ctx context.Context) {
	v, err := h.collectStacks(ctx, 3*time.Second, false)
	if err != nil {
		h.notef("gorun: --timeout: no stacks: %v\n", err)
		return
	}
	h.hang = v
	var b strings.Builder
	fmt.Fprintf(&b, "gorun: where the ranks were when --timeout %v expired:\n", h.o.Timeout)
	v.WriteText(&b, false)
	h.notef("%s", b.String())
}
