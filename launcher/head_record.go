package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/jobrecord"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
)

// infoTimeout bounds the agents' answers about their hosts (--record).
const infoTimeout = 5 * time.Second

// bindingOf describes a rank's binding for the job record; nil when the
// agent planned none.
func bindingOf(b *topology.RankBinding) *control.Binding {
	if b == nil {
		return nil
	}
	out := &control.Binding{CPUs: b.CPUs.String(), Why: b.Why}
	var mems []string
	for _, m := range b.Mems {
		mems = append(mems, strconv.Itoa(m))
	}
	out.Mems = strings.Join(mems, ",")
	if b.GPU != nil {
		out.GPUs = fmt.Sprintf("%s %d (%s)", b.GPU.Vendor, b.GPU.Index, b.GPU.BusID)
	}
	return out
}

// askHosts, for --record, asks every agent about its host once the ranks
// are launched; the answers are in h.hostInfo when h.infoDone is closed.
func (h *head) askHosts(ctx context.Context) {
	defer close(h.infoDone)
	replies, _, err := h.probeAll(ctx, control.Probe{Kind: control.ProbeInfo, Timeout: infoTimeout})
	if err == nil {
		h.hostInfo = replies
	}
}

// writeRecord writes the job record (--record) of a job that ended with
// summary s. The record keeps gorun's command line and the summary's
// argv; Record.Write redacts both (jobrecord.RedactArgs), whichever
// path s came by.
func (h *head) writeRecord(ctx context.Context, s Summary) {
	if h.infoDone != nil {
		select {
		case <-h.infoDone:
		case <-time.After(infoTimeout + 3*time.Second):
		}
	}
	host, _ := os.Hostname()
	head := jobrecord.Gather(ctx, h.o.Version)
	r := &jobrecord.Record{JobID: h.jobID, Argv: os.Args, Start: h.start, End: time.Now(), GorunVersion: h.o.Version,
		HeadHost: host, Head: &head, Reason: s.Reason, Message: s.Message, ExitCode: s.ExitCode,
		ConfigFiles: h.o.ConfigFiles}
	var plan strings.Builder
	h.plan.Format(&plan)
	r.Plan.Text = strings.Split(strings.TrimRight(plan.String(), "\n"), "\n")
	for rank, p := range h.plan.Ranks {
		r.Plan.Ranks = append(r.Plan.Ranks, jobrecord.RankPlace{Rank: rank, Host: h.plan.Nodes[p.Node].Host.Name,
			LocalRank: p.LocalRank, NodeRank: p.Node})
	}
	for i, n := range h.plan.Nodes {
		rep, ok := h.hostInfo[i]
		var hi jobrecord.HostInfo
		switch {
		case !ok:
			hi.Notes = []string{"its agent did not answer"}
		case rep.Err != "":
			hi.Notes = []string{"its agent: " + rep.Err}
		default:
			if err := json.Unmarshal(rep.Data, &hi); err != nil {
				hi.Notes = []string{"bad answer: " + err.Error()}
			}
		}
		hi.Host = n.Host.Name
		r.Hosts = append(r.Hosts, hi)
	}
	r.DiffEnv()
	for rank, b := range h.binds {
		if b != (control.Binding{}) {
			r.Bindings = append(r.Bindings, jobrecord.Binding{Rank: rank, Host: h.rec[rank].Host, CPUs: b.CPUs, Mems: b.Mems, GPUs: b.GPUs, Note: b.Why})
		}
	}
	ph := func(name string, from, to time.Duration) {
		if to > 0 {
			r.Phases = append(r.Phases, jobrecord.Phase{Name: name, Start: h.start.Add(from), Duration: to - from})
		}
	}
	p := h.phases
	ph("connect", 0, p.Connected)
	ph("agents up", p.Connected, p.AgentsUp)
	ph("launch", p.AgentsUp, p.RanksStarted)
	if p.FirstFence > 0 {
		ph("first fence", p.RanksStarted, p.FirstFence)
	}
	ph("run", p.RanksStarted, p.AllExited)
	for _, rr := range h.rec {
		e := jobrecord.RankEnd{Rank: rr.Rank, Host: rr.Host, PID: rr.PID, Exit: rr.Code, Signal: rr.Signal, Cause: rr.describe(), Restarts: rr.Restarts}
		if rr.StderrTail != "" {
			e.LastLines = strings.Split(strings.TrimRight(rr.StderrTail, "\n"), "\n")
		}
		r.Ranks = append(r.Ranks, e)
	}
	if f := s.FirstFailure; f != nil {
		r.FirstFailure = &jobrecord.Failure{Rank: f.Rank, Host: f.Host, Cause: f.describe()}
	}
	if h.hang != nil {
		r.Hang, _ = json.Marshal(h.hang)
	}
	r.Summary, _ = json.Marshal(s)
	if err := r.Write(h.o.RecordDir); err != nil {
		h.notef("gorun: --record: %v\n", err)
	}
}
