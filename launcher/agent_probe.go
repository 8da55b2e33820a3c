package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gorun/gorun/env"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/stacks"
)

// defaultProbeTimeout bounds an agent's answer to a probe whose Timeout is
// unset.
const defaultProbeTimeout = 10 * time.Second

// probeWorkers bounds the ranks an agent reads at once for one probe.
const probeWorkers = 8

// onProbe answers one of the head's probes in a goroutine of its own,
// from a view of the agent taken now: a probe reads the ranks and the
// host and changes nothing in them.
func (a *agent) onProbe(q control.Probe) {
	go a.answerProbe(q, a.view())
}

// answerProbe answers a probe from the agent's view v.
func (a *agent) answerProbe(q control.Probe, v probeView) {
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = defaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		data any
		err  error
	)
	switch q.Kind {
	case control.ProbeStacks:
		data, err = a.probeStacks(ctx, v, q.Lines)
	case control.ProbeStatus:
		data, err = a.probeStatus(ctx, v)
	case control.ProbeInfo:
		data, err = a.probeInfo(ctx)
	default:
		err = fmt.Errorf("unknown probe %q", q.Kind)
	}
	rep := control.ProbeReply{ID: q.ID}
	if err == nil {
		rep.Data, err = json.Marshal(data)
	}
	if err != nil {
		rep.Err = err.Error()
	}
	a.w.Send(control.TypeProbeRe, rep)
}

// liveRank is a rank that a probe reads.
type liveRank struct {
	rank, pid int
	start     time.Time
}

// probeView is what a probe reads of the agent: the ranks running now,
// by rank, the generation's KV and PMI servers (nil if none), and the
// Python hook's directory.
type probeView struct {
	ranks     []liveRank
	kv        *rendezvous.KVServer
	pmi       *rendezvous.PMIServer
	stacksDir string
}

// view takes a probe's view of the agent, on the loop.
func (a *agent) view() probeView {
	a.awaitPrep() // stacksDir is the preparation's until it is done
	out := make([]liveRank, 0, len(a.byPID))
	for pid, p := range a.byPID {
		out = append(out, liveRank{p.rank, pid, p.start})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rank < out[j].rank })
	v := probeView{ranks: out, stacksDir: a.stacksDir}
	if a.pmi != nil {
		v.kv, v.pmi = a.pmi.kv, a.pmi.srv
	}
	return v
}

// eachRank runs f for every live rank, probeWorkers at a time, and
// returns the results in rank order.
func eachRank[T any](ranks []liveRank, f func(liveRank) T) []T {
	out := make([]T, len(ranks))
	sem := make(chan struct{}, probeWorkers)
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = f(r)
		}()
	}
	wg.Wait()
	return out
}

// probeStacks returns every local rank's stacks: a Go rank connected to
// the KV server dumps its goroutines through that connection; any other
// rank is read by package stacks (native tools, the Python hook), with
// native frames' files and lines if asked.
func (a *agent) probeStacks(ctx context.Context, v probeView, lines bool) (any, error) {
	if a.simulated() {
		return []stacks.Rank{}, nil
	}
	kv := v.kv
	opt := stacks.Options{StacksDir: v.stacksDir, NoLines: !lines}
	return eachRank(v.ranks, func(r liveRank) stacks.Rank {
		sr := stacks.Rank{Rank: r.rank, Host: a.o.Host, PID: r.pid}
		if kv != nil {
			if dump, err := kv.Dump(ctx, r.rank); err == nil {
				p, _ := stacks.ProcInfo(kvPID(kv, r))
				p.Lang, p.Method, p.Threads = "go", "go-client", stacks.ParseGo(dump)
				sr.Procs = []stacks.Proc{p}
				return sr
			}
		}
		procs, err := stacks.Collect(ctx, r.pid, opt)
		sr.Procs = procs
		if err != nil {
			sr.Err = err.Error()
		}
		return sr
	}), nil
}

// kvPID is the pid of the rank's process that holds its KV connection,
// or the rank's own.
func kvPID(kv *rendezvous.KVServer, r liveRank) int {
	if pid := kv.PeerPID(r.rank); pid > 0 {
		return pid
	}
	return r.pid
}

// cpuSample is a rank's CPU time at one status probe.
type cpuSample struct {
	at  time.Time
	cpu float64
}

// probeStatus returns every local rank's state: its processes' CPU time
// and resident memory summed, its main process's state, its CPU use
// since the last probe, and its rendezvous and collective calls.
func (a *agent) probeStatus(ctx context.Context, v probeView) (any, error) {
	if a.simulated() {
		return []control.RankStatus{}, nil
	}
	kv, ranks := v.kv, v.ranks
	now := time.Now()
	out := eachRank(ranks, func(r liveRank) control.RankStatus {
		s := control.RankStatus{Rank: r.rank, PID: r.pid, State: "exited"}
		if p, err := stacks.ProcInfo(r.pid); err == nil {
			s.State = p.State
		}
		for _, pid := range procfs.Proc.Tree(r.pid, 64) {
			if p, err := stacks.ProcInfo(pid); err == nil {
				s.CPU += p.CPU
			}
			s.RSSKB += procfs.Proc.StatusKB(pid, "VmRSS")
		}
		if kv != nil {
			s.Ops = kv.Ops(r.rank)
			if p, err := kv.Progress(ctx, r.rank); err == nil {
				s.Coll, _ = json.Marshal(p)
			}
		}
		if v.pmi != nil {
			s.Ops += v.pmi.Ops(r.rank)
		}
		return s
	})
	a.cpuMu.Lock()
	defer a.cpuMu.Unlock()
	if a.cpuPrev == nil {
		a.cpuPrev = map[int]cpuSample{}
	}
	for i, r := range ranks {
		prev, ok := a.cpuPrev[r.pid]
		if !ok {
			prev = cpuSample{at: r.start}
		}
		if dt := now.Sub(prev.at).Seconds(); dt > 0 {
			out[i].CPUPercent = 100 * (out[i].CPU - prev.cpu) / dt
		}
		a.cpuPrev[r.pid] = cpuSample{now, out[i].CPU}
	}
	return out, nil
}

// prepareStacks makes the directory where the ranks' Python hook writes
// its dumps, with the hook, once per agent; "" (no hook) if it cannot,
// or for simulated ranks.
func (a *agent) prepareStacks() string {
	a.awaitPrep()
	return a.makeStacksDir()
}

// makeStacksDir is prepareStacks, without waiting for the preparation
// that runs it.
func (a *agent) makeStacksDir() string {
	if a.stacksDir != "" || a.simulated() {
		return a.stacksDir
	}
	if a.makeSockDir() != nil {
		return ""
	}
	dir := filepath.Join(a.sockDir, "stacks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		a.log.printf("no Python stacks hook: %v", err)
		return ""
	}
	if err := stacks.WritePythonHook(env.StacksHookDir(dir)); err != nil {
		a.log.printf("no Python stacks hook: %v", err)
		return ""
	}
	a.stacksDir = dir
	return dir
}

// prepareHost starts, beside the head's last steps before the launch, what
// the agent's first launch would otherwise make first: the ranks'
// socket directory and the Python stacks hook in it (files: a few
// hundred microseconds on a journalled /tmp). It starts after the head's
// hello, so that an agent the head never uses (EarlyAgent) leaves no
// directory behind; awaitPrep waits for it.
func (a *agent) prepareHost() {
	if a.simulated() {
		return
	}
	a.prepDone = make(chan struct{})
	go func() {
		defer close(a.prepDone)
		a.makeStacksDir()
	}()
}

// awaitPrep waits for the preparation prepareHost started, if any: until
// then sockDir and stacksDir are its.
func (a *agent) awaitPrep() {
	if a.prepDone != nil {
		<-a.prepDone
		a.prepDone = nil
	}
}
