package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/jobs"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/stacks"
)

// The requests the job socket answers (jobs.Request.Op).
const (
	OpStacks = "stacks" // a Verdict over every rank's stacks
	OpStatus = "status" // a JobStatus
)

// stacksTimeout bounds the agents' work on a stacks probe.
const stacksTimeout = 10 * time.Second

// rankLive is what the job socket and the hang watch read of a rank while
// the head's loop runs.
type rankLive struct {
	lastOut atomic.Int64           // Unix ns of its last output; 0: none yet
	ended   atomic.Pointer[string] // how it ended in the current generation
}

// probeSet matches the agents' answers to the probes waiting for them.
type probeSet struct {
	mu   sync.Mutex
	next uint64
	wait map[uint64]chan probeAnswer
}

type probeAnswer struct {
	node int
	rep  control.ProbeReply
}

func (p *probeSet) open(n int) (uint64, chan probeAnswer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wait == nil {
		p.wait = map[uint64]chan probeAnswer{}
	}
	p.next++
	ch := make(chan probeAnswer, n)
	p.wait[p.next] = ch
	return p.next, ch
}

func (p *probeSet) close(id uint64) {
	p.mu.Lock()
	delete(p.wait, id)
	p.mu.Unlock()
}

// deliver hands an agent's answer to the probe waiting for it; a late
// answer is dropped.
func (p *probeSet) deliver(node int, f control.Frame) error {
	var rep control.ProbeReply
	if err := f.Decode(&rep); err != nil {
		return err
	}
	p.mu.Lock()
	ch := p.wait[rep.ID]
	p.mu.Unlock()
	if ch != nil {
		select {
		case ch <- probeAnswer{node, rep}:
		default:
		}
	}
	return nil
}

// errNotStarted: a probe before the ranks were launched.
var errNotStarted = errors.New("the job's ranks have not started yet")

// probeAll asks every connected agent kind and waits for their answers,
// at most timeout and a margin. It returns the answers by node and the
// nodes that did not answer in time.
func (h *head) probeAll(ctx context.Context, q control.Probe) (map[int]control.ProbeReply, []int, error) {
	timeout := q.Timeout
	if !h.launched.Load() {
		return nil, nil, errNotStarted
	}
	id, ch := h.probes.open(len(h.agents))
	defer h.probes.close(id)
	q.ID = id
	sent := map[int]bool{}
	for i, a := range h.agents {
		if a == nil || a.ended.Load() {
			continue
		}
		if a.w.Send(control.TypeProbe, q) == nil {
			sent[i] = true
		}
	}
	out := make(map[int]control.ProbeReply, len(sent))
	t := time.NewTimer(timeout + 2*time.Second)
	defer t.Stop()
wait:
	for len(out) < len(sent) {
		select {
		case a := <-ch:
			if sent[a.node] {
				out[a.node] = a.rep
			}
		case <-t.C:
			break wait
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-h.done:
			return nil, nil, errors.New("the job ended")
		}
	}
	var missing []int
	for n := range sent {
		if _, ok := out[n]; !ok {
			missing = append(missing, n)
		}
	}
	sort.Ints(missing)
	return out, missing, nil
}

// collectStacks asks every agent for its ranks' stacks (with native
// frames' files and lines if lines) and merges them into a verdict; ranks
// that ended, or whose agent did not answer, are there with the reason.
func (h *head) collectStacks(ctx context.Context, timeout time.Duration, lines bool) (*stacks.Verdict, error) {
	replies, missing, err := h.probeAll(ctx, control.Probe{Kind: control.ProbeStacks, Timeout: timeout, Lines: lines})
	if err != nil {
		return nil, err
	}
	ranks := make([]stacks.Rank, 0, len(h.plan.Ranks))
	got := make([]bool, len(h.plan.Ranks))
	add := func(r stacks.Rank) {
		if r.Rank >= 0 && r.Rank < len(got) && !got[r.Rank] {
			got[r.Rank] = true
			ranks = append(ranks, r)
		}
	}
	for node, rep := range replies {
		host := h.plan.Nodes[node].Host.Name
		var rs []stacks.Rank
		if rep.Err == "" {
			if err := json.Unmarshal(rep.Data, &rs); err != nil {
				rep.Err = fmt.Sprintf("bad answer: %v", err)
			}
		}
		if rep.Err != "" {
			for _, r := range h.plan.Nodes[node].Ranks {
				add(stacks.Rank{Rank: r, Host: host, Err: "its agent: " + rep.Err})
			}
			continue
		}
		for _, r := range rs {
			r.Host = host
			add(r)
		}
	}
	silent := map[int]bool{}
	for _, n := range missing {
		silent[n] = true
	}
	for r := range h.plan.Ranks {
		if got[r] {
			continue
		}
		node := h.plan.Ranks[r].Node
		why := "not running"
		switch {
		case h.live[r].ended.Load() != nil:
			why = *h.live[r].ended.Load()
		case silent[node]:
			why = fmt.Sprintf("its agent did not answer within %v", timeout)
		}
		add(stacks.Rank{Rank: r, Host: h.plan.Nodes[node].Host.Name, Err: why})
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i].Rank < ranks[j].Rank })
	return stacks.NewVerdict(ranks), nil
}

// JobStatus is gorun status's answer: every rank's state.
type JobStatus struct {
	ID       string      `json:"id"`
	Argv     []string    `json:"argv"`
	Hosts    []string    `json:"hosts"`
	Started  time.Time   `json:"started"`
	Restarts int         `json:"restarts"`
	Ranks    []RankState `json:"ranks"`
	// Stragglers compares Go ranks' arrivals at their recent collective
	// calls; nil when no rank reported any.
	Stragglers *rendezvous.StragglerReport `json:"stragglers,omitempty"`
	// NoAnswer names the hosts whose agents did not answer.
	NoAnswer []string `json:"no_answer,omitempty"`
}

// RankState is one rank's line of gorun status.
type RankState struct {
	Rank       int     `json:"rank"`
	Host       string  `json:"host"`
	PID        int     `json:"pid,omitempty"`
	State      string  `json:"state"`
	CPU        float64 `json:"cpu_s"`
	CPUPercent float64 `json:"cpu_pct"`
	RSSKB      int64   `json:"rss_kb"`
	// SinceOutput is how long ago, in seconds, the rank's last output
	// line reached gorun; -1: none yet.
	SinceOutput float64 `json:"since_output_s"`
	Restarts    int     `json:"restarts"`
	Ops         uint64  `json:"rendezvous_ops"`
	Calls       uint64  `json:"collective_calls"`
}

// collectStatus asks every agent for its ranks' state.
func (h *head) collectStatus(ctx context.Context, timeout time.Duration) (*JobStatus, error) {
	replies, missing, err := h.probeAll(ctx, control.Probe{Kind: control.ProbeStatus, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	st := &JobStatus{ID: h.jobID, Argv: h.o.Argv, Started: h.start, Restarts: int(h.gen.Load())}
	for _, n := range h.plan.Nodes {
		st.Hosts = append(st.Hosts, n.Host.Name)
	}
	for _, n := range missing {
		st.NoAnswer = append(st.NoAnswer, h.plan.Nodes[n].Host.Name)
	}
	st.Ranks = make([]RankState, len(h.plan.Ranks))
	for r := range st.Ranks {
		rs := &st.Ranks[r]
		rs.Rank, rs.Host, rs.Restarts, rs.SinceOutput = r, h.plan.Nodes[h.plan.Ranks[r].Node].Host.Name, st.Restarts, -1
		rs.State = "unknown"
		if e := h.live[r].ended.Load(); e != nil {
			rs.State = "exited"
		}
		if t := h.live[r].lastOut.Load(); t != 0 {
			rs.SinceOutput = now.Sub(time.Unix(0, t)).Seconds()
		}
	}
	byRank := map[int]rendezvous.Progress{}
	for _, rep := range replies {
		if rep.Err != "" {
			continue
		}
		var rss []control.RankStatus
		if json.Unmarshal(rep.Data, &rss) != nil {
			continue
		}
		for _, s := range rss {
			if s.Rank < 0 || s.Rank >= len(st.Ranks) {
				continue
			}
			rs := &st.Ranks[s.Rank]
			rs.PID, rs.State, rs.CPU, rs.CPUPercent, rs.RSSKB, rs.Ops = s.PID, s.State, s.CPU, s.CPUPercent, s.RSSKB, s.Ops
			if len(s.Coll) > 0 {
				var p rendezvous.Progress
				if json.Unmarshal(s.Coll, &p) == nil {
					rs.Calls = p.Calls
					byRank[s.Rank] = p
				}
			}
		}
	}
	if len(byRank) > 0 {
		rep := rendezvous.Stragglers(byRank)
		st.Stragglers = &rep
	}
	return st, nil
}

// serveJob answers the job socket's requests.
func (h *head) serveJob(ctx context.Context, r jobs.Request) (any, error) {
	switch r.Op {
	case OpStacks:
		return h.collectStacks(ctx, stacksTimeout, r.Verbose)
	case OpStatus:
		return h.collectStatus(ctx, 5*time.Second)
	}
	return nil, fmt.Errorf("unknown request %q", r.Op)
}

// publishDelay is how long a job runs before it is published: one that
// ends sooner (a few milliseconds of /bin/true) has nothing to ask about,
// and pays nothing for the job socket.
const publishDelay = 50 * time.Millisecond

// publish starts publishing the job (publishNow) in the background, off
// the launch's path, once it has run publishDelay; unpublish waits for
// it, and stops it if it has not started.
func (h *head) publish() {
	h.jobsMu.Lock()
	h.jobsDone, h.jobsStop = make(chan struct{}), make(chan struct{})
	done, stop := h.jobsDone, h.jobsStop
	h.jobsMu.Unlock()
	planned := h.plannedChan()
	go func() {
		defer close(done)
		t := time.NewTimer(publishDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
			return
		}
		// The plan is read from here on, by publishNow and by the job
		// socket's requests, without a lock: not while prepare may still
		// make it again (a loaded machine's agents can take 50 ms).
		select {
		case <-planned:
			h.publishNow()
		case <-stop:
		}
	}()
}

// plannedChan is the channel that planFinal closes.
func (h *head) plannedChan() chan struct{} {
	h.jobsMu.Lock()
	defer h.jobsMu.Unlock()
	if h.planned == nil {
		h.planned = make(chan struct{})
	}
	return h.planned
}

// planFinal says that the plan will not change again (publish waits for it).
func (h *head) planFinal() {
	ch := h.plannedChan()
	h.plannedOnce.Do(func() { close(ch) })
}

// publishNow serves the job socket and writes the job file, unless the
// job directory is "off"; a failure is a note, not the job's end.
func (h *head) publishNow() {
	dir := h.o.JobsDir
	if dir == "" {
		var err error
		if dir, err = jobs.Dir(); err != nil {
			h.notef("gorun: note: gorun ps, status and stacks will not see this job: %v\n", err)
			return
		}
	}
	if dir == jobs.Off {
		return
	}
	ips := []string{"127.0.0.1"}
	for _, n := range h.plan.Nodes {
		if !IsLocal(n.Host.Name) {
			ips = []string{""} // every interface: other hosts may ask too
			break
		}
	}
	host, _ := os.Hostname()
	h.jobsMu.Lock()
	state := h.jobState
	h.jobsMu.Unlock()
	if state == "" {
		state = "starting"
	}
	info := jobs.Info{ID: h.jobID, Host: host, Argv: h.o.Argv, Ranks: len(h.plan.Ranks), Started: h.start, State: state}
	for _, n := range h.plan.Nodes {
		info.Hosts = append(info.Hosts, n.Host.Name)
	}
	srv, err := jobs.Publish(dir, info, ips, h.serveJob)
	if err != nil {
		h.notef("gorun: note: gorun ps, status and stacks will not see this job: %v\n", err)
		return
	}
	h.jobsMu.Lock()
	defer h.jobsMu.Unlock()
	h.jobsrv = srv
	if h.jobState != "" {
		srv.SetState(h.jobState) // a no-op unless it changed meanwhile
	}
}

// setState records the job's state in its job file (once it is there),
// in the background: the file is written off the launch's path, always
// with the latest state.
func (h *head) setState(s string) {
	h.jobsMu.Lock()
	h.jobState = s
	h.jobsMu.Unlock()
	go func() {
		h.jobsMu.Lock()
		defer h.jobsMu.Unlock()
		if h.jobsrv != nil {
			h.jobsrv.SetState(h.jobState)
		}
	}()
}

// unpublish removes the job file and closes the job socket (after
// publish, if it is under way), and waits until that is done.
func (h *head) unpublish() {
	h.unpublishSoon()
	h.jobsMu.Lock()
	done := h.jobsDone
	h.jobsMu.Unlock()
	if done != nil {
		<-done
	}
}

// unpublishSoon unpublishes in the background, while the agents shut
// down; unpublish waits for it.
func (h *head) unpublishSoon() {
	h.jobsMu.Lock()
	done := h.jobsDone
	h.stopPublishing()
	h.jobsMu.Unlock()
	if done == nil {
		return
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-done
		if h.jobsrv != nil {
			h.jobsrv.Close()
		}
	}()
	h.jobsMu.Lock()
	h.jobsDone = closed
	h.jobsMu.Unlock()
}

// stopPublishing stops a publish that has not started. Called with
// h.jobsMu held.
func (h *head) stopPublishing() {
	if h.jobsStop != nil {
		close(h.jobsStop)
		h.jobsStop = nil
	}
}
