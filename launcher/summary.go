package launcher

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/stacks"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/jobrecord"
	"github.com/gorun/gorun/launcher/control"
)

// RankRecord is what the head knows about one rank at the end of a job.
type RankRecord struct {
	Rank       int       `json:"rank"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Code       int       `json:"exit_code"`        // -1 when killed by a signal or never ended
	Signal     string    `json:"signal,omitempty"` // e.g. "SIGKILL"
	SignalNum  int       `json:"signal_number,omitempty"`
	Restarts   int       `json:"restarts"`
	Generation int       `json:"-"`
	Stopped    bool      `json:"stopped_by_gorun,omitempty"`
	Err        string    `json:"error,omitempty"`
	StderrTail string    `json:"stderr_tail,omitempty"`
	MaxRSS     int64     `json:"max_rss_kb,omitempty"`
	OOMKills   int       `json:"oom_kills,omitempty"`
	// Job and Nspace name the spawned job (MPI_Comm_spawn) the rank
	// belongs to, Rank being its rank there; 0 and "" for the job's own
	// ranks.
	Job    int    `json:"spawned_job,omitempty"`
	Nspace string `json:"namespace,omitempty"`
}

// name names the rank: "rank 3", or "rank 1 of spawned job 2
// (gorun.<job>.0.2)".
func (r *RankRecord) name() string {
	if r.Job == 0 {
		return fmt.Sprintf("rank %d", r.Rank)
	}
	return fmt.Sprintf("rank %d of spawned job %d (%s)", r.Rank, r.Job, r.Nspace)
}

func (r *RankRecord) update(x *control.Exited) {
	if x.PID != 0 || x.Generation != r.Generation {
		// A rank that could not start in a later generation has no pid.
		r.PID, r.Start = x.PID, x.Start
	}
	r.Generation, r.End, r.Code, r.SignalNum, r.Signal = x.Generation, x.End, x.Code, x.Signal, ""
	if x.Signal != 0 {
		r.Signal = sigName(unixSignal(x.Signal))
	}
	r.Stopped, r.Err, r.StderrTail, r.MaxRSS, r.OOMKills = x.Stopped, x.Err, x.StderrTail, x.MaxRSS, x.OOMKills
}

func unixSignal(n int) unix.Signal { return unix.Signal(n) }

func (r *RankRecord) failed() bool { return r.Code != 0 || r.SignalNum != 0 || r.Err != "" }

// startFailure reports whether the rank's program could not be executed
// (missing, not executable, a bad interpreter: the shells' 127 and 126)
// before it ran: starting it again would fail the same way, so no
// restart follows (--max-restarts).
func (r *RankRecord) startFailure() bool {
	return r.PID == 0 && r.Err != "" && (r.Code == ExitNotFound || r.Code == ExitNotExec)
}

// exitCode is the code gorun exits with when this rank is the first failure.
func (r *RankRecord) exitCode() int {
	switch {
	case r.SignalNum != 0:
		return exitSignalStart + r.SignalNum
	case r.Code > 0:
		return r.Code
	}
	return ExitLaunch
}

// describe says how the rank ended, in words.
func (r *RankRecord) describe() string {
	switch {
	case r.Err != "" && r.PID == 0:
		return "could not start: " + r.Err
	case r.Err != "":
		return r.Err
	case r.SignalNum != 0:
		return fmt.Sprintf("(pid %d) was killed by %s", r.PID, describeSignal(r.SignalNum))
	}
	return fmt.Sprintf("(pid %d) exited with code %d", r.PID, r.Code)
}

// Phases are the job's milestones, measured from gorun's start.
type Phases struct {
	Connected    time.Duration `json:"connected_ns"` // every agent's process started (SSH connected, gorun staged)
	AgentsUp     time.Duration `json:"agents_up_ns"` // every agent said hello
	RanksStarted time.Duration `json:"ranks_started_ns"`
	AllExited    time.Duration `json:"all_exited_ns"`
	// FirstFence is when the first rendezvous fence (PMI barrier)
	// completed; 0 if there was none.
	FirstFence time.Duration `json:"first_fence_ns,omitempty"`
	// FirstOutput is when the first bytes a rank wrote reached gorun; 0
	// if no rank wrote any.
	FirstOutput time.Duration `json:"first_output_ns,omitempty"`
}

// trace prints the job's phases (--trace), in milliseconds from gorun's
// start: one line, for the job's launch to be taken apart.
func (h *head) trace() {
	t0 := cmp.Or(h.o.Started, h.start)
	ms := func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(h.start.Sub(t0)+d)/float64(time.Millisecond))
	}
	p := h.phases
	h.notef("gorun: trace (ms from gorun's start): flags, config, plan %.1f; agents started %s; agents up %s; ranks started %s; first output %s; first fence %s; all exited %s; agents gone %s\n",
		float64(h.start.Sub(t0))/float64(time.Millisecond), ms(p.Connected), ms(p.AgentsUp), ms(p.RanksStarted), ms(p.FirstOutput), ms(p.FirstFence), ms(p.AllExited), ms(time.Since(h.start)))
}

// Summary is the record --summary-json writes.
type Summary struct {
	JobID string `json:"job_id"`
	// Argv is the program and its arguments, their secrets redacted
	// (see jobrecord.RedactArgs): the summary is shared as the record is.
	Argv         []string    `json:"argv"`
	NP           int         `json:"np"`
	Hosts        []string    `json:"hosts"`
	ExitCode     int         `json:"exit_code"`
	Reason       string      `json:"reason"` // success, rank-failed, timeout, signal, agent-lost, output-lost, cancelled
	Message      string      `json:"message,omitempty"`
	FirstFailure *RankRecord `json:"first_failure,omitempty"`
	Restarts     int         `json:"restarts"`
	// Membership lists a per-node launch's changes of membership, one
	// line each (which node was lost, how many nodes went on).
	Membership []string      `json:"membership,omitempty"`
	Ranks      []RankRecord  `json:"ranks"`
	Phases     Phases        `json:"phases"`
	HeadMaxRSS int64         `json:"head_max_rss_kb"`
	Agents     []AgentRecord `json:"agents"`
	// Hang is where every rank was when the job was found hung
	// (--hang-timeout) or when --timeout expired.
	Hang *stacks.Verdict `json:"hang,omitempty"`
	// Stragglers compares when Go ranks entered their last collective
	// calls (up to 1,024 of them): the rank last in most of them.
	Stragglers *rendezvous.StragglerReport `json:"stragglers,omitempty"`
}

// AgentRecord is one agent's figures.
type AgentRecord struct {
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	MaxRSS int64  `json:"max_rss_kb"`
}

// summarize prints the summary of a job that did not succeed, writes
// --summary-json, and returns the exit code.
func (h *head) summarize(res result) int {
	s, text := h.summary(res)
	w := new(strings.Builder)
	defer func() { h.notef("%s", w.String()) }()
	for _, m := range s.Membership {
		fmt.Fprintf(w, "gorun: job %s: membership: %s\n", h.jobID, m)
	}
	w.WriteString(text)
	s.HeadMaxRSS = peakRSS()
	for i, a := range h.agents {
		s.Agents = append(s.Agents, AgentRecord{Host: h.plan.Nodes[i].Host.Name, PID: a.hello.PID, MaxRSS: a.maxRSS})
	}
	if h.o.SummaryJSON != "" {
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := os.WriteFile(h.o.SummaryJSON, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(w, "gorun: --summary-json: %v\n", err)
		}
	}
	if h.o.RecordDir != "" {
		h.writeRecord(context.Background(), s)
	}
	return s.ExitCode
}

// summary is the record of a job that ended with res, but for the
// figures of the head's and agents' memory, and what gorun prints about
// it (nothing for a success).
func (h *head) summary(res result) (Summary, string) {
	s := Summary{JobID: h.jobID, Argv: jobrecord.RedactArgs(h.o.Argv), NP: len(h.plan.Ranks), Ranks: h.rec, Phases: h.phases, Hang: h.hang, Membership: h.o.Membership}
	if len(h.spawnedRecs) > 0 {
		s.Ranks = append(slices.Clip(h.rec), h.spawnedRecs...)
	}
	if len(h.finalProg) > 0 {
		if rep := rendezvous.Stragglers(h.finalProg); rep.Calls > 0 {
			s.Stragglers = &rep
		}
	}
	for _, n := range h.plan.Nodes {
		s.Hosts = append(s.Hosts, n.Host.Name)
	}
	if len(h.rec) > 0 {
		s.Restarts = h.rec[0].Restarts
	}
	w := new(strings.Builder)
	stopped := 0
	for _, r := range s.Ranks {
		if r.Stopped && (res.first == nil || r.Rank != res.first.Rank || r.Job != res.first.Job) {
			stopped++
		}
	}
	switch res.reason {
	case reasonSuccess:
		s.Reason, s.ExitCode = "success", ExitOK
	case reasonFailed:
		h.failure(&s, w, res.first, stopped)
	case reasonTimeout:
		s.Reason, s.ExitCode = "timeout", ExitTimeout
		s.Message = fmt.Sprintf("--timeout %v expired; %d rank(s) were stopped", h.o.Timeout, stopped)
		fmt.Fprintf(w, "gorun: job %s timed out: %s\n", h.jobID, s.Message)
	case reasonSignal:
		s.Reason, s.ExitCode = "signal", exitSignalStart+int(res.signal)
		s.Message = fmt.Sprintf("gorun got %s and forwarded it to every rank", sigName(res.signal))
		fmt.Fprintf(w, "gorun: job %s ended: %s\n", h.jobID, s.Message)
	case reasonAgentLost:
		s.Reason, s.ExitCode, s.Message = "agent-lost", ExitLaunch, res.lost
		fmt.Fprintf(w, "gorun: job %s failed: %s\n", h.jobID, res.lost)
	case reasonOutputLost:
		s.Reason, s.ExitCode, s.Message = "output-lost", ExitLaunch, res.lost
		fmt.Fprintf(w, "gorun: job %s failed: %s\n", h.jobID, res.lost)
		if stopped > 0 {
			fmt.Fprintf(w, "gorun: %d rank(s) were stopped by gorun (SIGTERM, SIGKILL after %v)\n", stopped, h.o.Grace)
		}
	case reasonHang:
		s.Reason, s.ExitCode = "hang", ExitHang
		s.Message = fmt.Sprintf("no rank made progress for --hang-timeout %v; %d rank(s) were stopped", h.o.HangTimeout, stopped)
		fmt.Fprintf(w, "gorun: job %s ended: %s\n", h.jobID, s.Message)
	case reasonCancelled:
		s.Reason, s.ExitCode = "cancelled", exitCancelled
		s.Message = fmt.Sprintf("it was cancelled; %d rank(s) were stopped", stopped)
		fmt.Fprintf(w, "gorun: job %s ended: %s\n", h.jobID, s.Message)
	}
	if res.reason != reasonSuccess && s.Stragglers != nil {
		fmt.Fprintf(w, "gorun: stragglers in the Go ranks' collectives: %s\n", s.Stragglers)
	}
	return s, w.String()
}

// failure fills in the summary of a job whose rank f failed first, and
// says what gorun knows of it.
func (h *head) failure(s *Summary, w io.Writer, f *RankRecord, stopped int) {
	s.Reason, s.ExitCode, s.FirstFailure = "rank-failed", f.exitCode(), f
	if f.Err != "" && f.PID == 0 {
		s.ExitCode = f.Code
	}
	s.Message = fmt.Sprintf("%s on %s %s", f.name(), f.Host, f.describe())
	fmt.Fprintf(w, "gorun: job %s failed: %s (the first failure, %.2fs after start)\n", h.jobID, s.Message, f.End.Sub(h.start).Seconds())
	if f.SignalNum == int(unix.SIGKILL) && !f.Stopped {
		if f.OOMKills > 0 {
			fmt.Fprintf(w, "gorun: the kernel's OOM killer killed %d process(es) while %s ran: it most likely ran out of memory\n", f.OOMKills, f.name())
		} else {
			fmt.Fprintf(w, "gorun: hint: gorun did not send that SIGKILL; the kernel's OOM killer sends it (see dmesg or journalctl -k), as do cgroup limits and users\n")
		}
	}
	if f.StderrTail != "" {
		fmt.Fprintf(w, "gorun: last lines of %s's stderr:\n%s\n", f.name(), indent(f.StderrTail, "    | "))
	}
	if stopped > 0 {
		fmt.Fprintf(w, "gorun: %d other rank(s) were stopped by gorun (SIGTERM, SIGKILL after %v)\n", stopped, h.o.Grace)
	}
}

// peakRSS returns this process's peak resident set in KiB (VmHWM). Unlike
// getrusage's ru_maxrss, it does not start from the peak of whatever
// process forked gorun (Linux carries ru_maxrss across fork and exec).
func peakRSS() int64 { return procfs.Proc.SelfStatusKB("VmHWM") }
