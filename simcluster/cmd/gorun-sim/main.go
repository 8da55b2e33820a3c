// Command gorun-sim runs a gorun job on a simulated cluster and prints
// one JSON line of its timings: bench/scale.sh runs it.
//
//	gorun-sim --hosts N --ranks-per-host R [--fanout K|auto] [--latency 50us] [--bandwidth 1.25e9]
//
// The head and the cluster run as two processes: the head is gorun's
// real head (launcher.Run) in a process of its own, so that its CPU time
// and peak memory are its own; the cluster process runs every host's
// real agent code, with simulated ranks (package simcluster). Each rank
// puts one key, enters one fence and gets another rank's key over PMI-1;
// then one rank fails, and gorun stops the others and the job.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/simcluster"
)

type config struct {
	hosts, perHost int
	fanout         string
	latency        time.Duration
	bandwidth      float64
	beatTimeout    time.Duration
	socket         string
	profile        string
}

func main() {
	var c config
	role := flag.String("role", "run", "run (both processes), cluster or head")
	flag.IntVar(&c.hosts, "hosts", 16, "simulated hosts")
	flag.IntVar(&c.perHost, "ranks-per-host", 8, "ranks per host")
	flag.StringVar(&c.fanout, "fanout", "auto", "the launch tree's fanout: auto (gorun's default), 0 (flat) or K")
	flag.DurationVar(&c.latency, "latency", 50*time.Microsecond, "one-way latency of every link")
	flag.Float64Var(&c.bandwidth, "bandwidth", 1.25e9, "bytes per second of every link, each way (0: unlimited)")
	flag.DurationVar(&c.beatTimeout, "beat-timeout", time.Minute, "the head's heartbeat timeout: longer than gorun's 5 s, since one machine's cores run every host's agent")
	flag.StringVar(&c.socket, "socket", "", "the cluster's socket (cluster and head roles)")
	profile := flag.String("cpuprofile", "", "write the CPU profiles of the head and of the cluster to `PREFIX`-head and PREFIX-cluster")
	flag.Parse()
	c.profile = *profile
	if *profile != "" && *role != "run" {
		f, err := os.Create(*profile + "-" + *role)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	var err error
	switch *role {
	case "run":
		err = run(c)
	case "cluster":
		err = cluster(c)
	case "head":
		err = head(c)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gorun-sim:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// failRank is the rank that fails: in the middle of the last host but one.
func (c config) failRank() int { return (c.hosts-2)*c.perHost + c.perHost/2 }

// clusterReport is what the cluster process prints when it ends.
type clusterReport struct {
	Stats  simcluster.Stats `json:"stats"`
	CPU    float64          `json:"cpu_s"`
	Agents int              `json:"agents"`
}

func cluster(c config) error {
	// One heap holds every host's agent here, and each collection scans
	// them all: a real host's agent has a small heap of its own. A looser
	// pace keeps the collector's share nearer what the hosts would pay.
	debug.SetGCPercent(400)
	cl := simcluster.New(simcluster.Config{Hosts: c.hosts, Latency: c.latency, Bandwidth: c.bandwidth,
		Script: simcluster.Script{Fence: true, FailRank: c.failRank()}})
	ln, err := net.Listen("unix", c.socket)
	if err != nil {
		return err
	}
	go cl.Serve(ln)
	fmt.Println("ready")
	// The driver closes our stdin once the head has ended.
	bufio.NewReader(os.Stdin).ReadString('\n')
	ln.Close()
	done := make(chan int, 1)
	go func() { done <- cl.Wait() }()
	var agents int
	select {
	case agents = <-done:
	case <-time.After(30 * time.Second):
		agents = -1
	}
	return json.NewEncoder(os.Stdout).Encode(clusterReport{Stats: cl.Stats(), CPU: cpuSeconds(), Agents: agents})
}

// headReport is what the head process prints when it ends.
type headReport struct {
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Code   int       `json:"code"`
	Err    string    `json:"err,omitempty"`
	Why    string    `json:"why,omitempty"` // gorun's summary's first line
	CPU    float64   `json:"cpu_s"`
	RSSMB  float64   `json:"rss_mb"`
	Fanout int       `json:"fanout"`
}

func head(c config) error {
	start := time.Now()
	fanout, err := launcher.ParseFanout(c.fanout)
	if err != nil {
		return err
	}
	cl := simcluster.New(simcluster.Config{Hosts: c.hosts})
	var stderr bytes.Buffer
	o := cl.Options(c.perHost, fanout, nil, &stderr)
	o.Starter = &simcluster.Dialer{Socket: c.socket}
	o.BeatTimeout = c.beatTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	code, err := launcher.Run(ctx, o)
	r := headReport{Start: start, End: time.Now(), Code: code, CPU: cpuSeconds(),
		RSSMB: float64(procfs.Proc.SelfStatusKB("VmHWM")) / 1024, Fanout: launcher.EffectiveFanout(o, len(o.Hosts))}
	if err != nil {
		r.Err = err.Error()
	}
	r.Why, _, _ = strings.Cut(stderr.String(), "\n")
	return json.NewEncoder(os.Stdout).Encode(r)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// result is the JSON line of a run.
type result struct {
	Hosts        int      `json:"hosts"`
	Ranks        int      `json:"ranks"`
	RanksPerHost int      `json:"ranks_per_host"`
	Fanout       int      `json:"fanout"`
	Mode         string   `json:"mode"`
	LatencyUS    float64  `json:"latency_us"`
	Launch       *float64 `json:"launch_s"`
	Fence        *float64 `json:"fence_s"`      // the last rank entered the fence -> the last through it and its get
	FenceSpan    *float64 `json:"fence_span_s"` // the first rank entered the fence -> the last through it
	FenceUp      *float64 `json:"fence_up_s"`   // the last rank entered the fence -> the first let out of the barrier
	FailStop     *float64 `json:"fail_stop_s"`
	Teardown     *float64 `json:"teardown_s"`
	HeadRSS      float64  `json:"head_rss_mb"`
	HeadCPU      float64  `json:"head_cpu_s"`
	ClusterCPU   float64  `json:"cluster_cpu_s"`
	Code         int      `json:"code"`
	Summary      string   `json:"summary"`
	Error        string   `json:"error,omitempty"`
}

func run(c config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gorun-sim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c.socket = filepath.Join(dir, "cluster.sock")
	args := func(role string) []string {
		return []string{"-role", role, "-hosts", fmt.Sprint(c.hosts), "-ranks-per-host", fmt.Sprint(c.perHost), "-fanout", c.fanout,
			"-latency", c.latency.String(), "-bandwidth", fmt.Sprint(c.bandwidth), "-beat-timeout", c.beatTimeout.String(), "-socket", c.socket, "-cpuprofile", c.profile}
	}
	cl := exec.Command(self, args("cluster")...)
	cl.Stderr = os.Stderr
	in, _ := cl.StdinPipe()
	out, _ := cl.StdoutPipe()
	if err := cl.Start(); err != nil {
		return err
	}
	defer cl.Process.Kill()
	clOut := bufio.NewReader(out)
	if line, err := clOut.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("the cluster process did not start: %q %v", line, err)
	}
	hd := exec.Command(self, args("head")...)
	hd.Stderr = os.Stderr
	hout, err := hd.Output()
	if err != nil {
		return fmt.Errorf("head: %w", err)
	}
	var h headReport
	if err := json.Unmarshal(hout, &h); err != nil {
		return fmt.Errorf("head's report %q: %w", hout, err)
	}
	in.Close()
	var cr clusterReport
	if err := json.NewDecoder(clOut).Decode(&cr); err != nil {
		return fmt.Errorf("cluster's report: %w", err)
	}
	cl.Wait()
	s := cr.Stats
	res := result{Hosts: c.hosts, Ranks: c.hosts * c.perHost, RanksPerHost: c.perHost, Fanout: h.Fanout, Mode: "flat",
		LatencyUS: float64(c.latency) / 1e3, HeadRSS: round(h.RSSMB), HeadCPU: round(h.CPU), ClusterCPU: round(cr.CPU),
		Code: h.Code, Summary: h.Why}
	if h.Fanout > 0 {
		res.Mode = "tree"
	}
	span := func(a, b time.Time) *float64 {
		if a.IsZero() || b.IsZero() {
			return nil
		}
		v := round(b.Sub(a).Seconds())
		return &v
	}
	if s.Ranks == res.Ranks {
		res.Launch = span(h.Start, s.LastStart)
	}
	res.Fence = span(s.FenceAll, s.FenceOut)
	res.FenceSpan = span(s.FenceIn, s.FenceOut)
	res.FenceUp = span(s.FenceAll, s.BarrierOut)
	if s.Stopped == res.Ranks-1 {
		res.FailStop = span(s.FailAt, s.LastStop)
		res.Teardown = span(s.LastStop, h.End)
	}
	var problems []string
	if h.Err != "" {
		problems = append(problems, "head: "+h.Err)
	}
	if h.Code != 1 {
		problems = append(problems, fmt.Sprintf("gorun exited %d, want 1 (rank %d's failure)", h.Code, c.failRank()))
	}
	if s.Ranks != res.Ranks || (s.Stopped != res.Ranks-1) {
		problems = append(problems, fmt.Sprintf("%d ranks started, %d stopped after the failure, of %d", s.Ranks, s.Stopped, res.Ranks))
	}
	problems = append(problems, s.Errors...)
	if len(problems) > 0 {
		res.Error = strings.Join(problems, "; ")
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func round(v float64) float64 { return float64(int64(v*1e4+0.5)) / 1e4 }
