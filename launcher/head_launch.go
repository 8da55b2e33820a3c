package launcher

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// What the head sends to start ranks: each agent's Launch, the rank
// environment --print-env shows instead, and rank's stdin.

// launchFor is node's Launch for generation gen.
func (h *head) launchFor(gen, node int, n Node, masterAddr string, masterPort int) control.Launch {
	l := control.Launch{
		Generation: gen, JobID: h.jobID, RunID: h.o.RunID, Secret: h.secret, Argv: h.o.Argv, Dir: h.dir(), Slurm: h.o.Alloc != nil && h.o.Alloc.Kind == BackendSlurm,
		Personality: string(h.o.Personality), Print: h.printFor(),
		WorldSize: len(h.plan.Ranks), LocalWorldSize: len(n.Ranks), NodeRank: node, NodeCount: len(h.plan.Nodes),
		Host: n.Host.Name, MasterAddr: masterAddr, MasterPort: masterPort, MaxRestarts: h.o.MaxRestarts,
		Exports: h.exports,
		PMI: control.PMI{KVSName: kvsName(h.jobID, gen), Mapping: h.mapping, PMIx: h.o.PMIx, Hosts: h.pmixHosts(),
			FenceTimeout: h.o.RendezvousTimeout, UnivSize: h.univSize(),
			RankBudget: control.KVBudget{Keys: h.o.KVRankBudget.Keys, Bytes: h.o.KVRankBudget.Bytes},
			JobBudget:  control.KVBudget{Keys: h.o.KVJobBudget.Keys, Bytes: h.o.KVJobBudget.Bytes}},
		Bind: control.Bind{To: h.o.BindTo, MapBy: h.plan.MapBy.Within, CPUsPerRank: h.o.CPUsPerRank, Report: h.o.ReportBind, GPUs: n.Host.GPUs, GPUBind: h.o.GPUBind,
			// With no host source gorun runs "oversubscribed and unbound".
			Oversubscribed: len(n.Ranks) > n.Host.Slots || h.o.ImplicitHosts && h.plan.Oversubscribed},
	}
	crossRank, crossSize := h.crossRanks()
	for i, r := range n.Ranks {
		l.Ranks = append(l.Ranks, control.RankSpec{Rank: r, LocalRank: i, Stdin: r == h.o.StdinRank && gen == h.o.FirstGeneration,
			CrossRank: crossRank[node][i], CrossSize: crossSize[i], App: appIndex(h.apps, r), Slot: h.plan.Ranks[r].Slot,
			Files: h.o.RankFiles.forRank(r, i, node, n.Host.Name, gen)})
	}
	l.Apps = h.apps
	return l
}

// univSize is the universe size the ranks are told (MPI_UNIVERSE_SIZE),
// as mpirun tells it: the slots of the job's hosts, at least its ranks.
// mpi4py's MPIPoolExecutor starts that many workers, less the job's
// ranks.
func (h *head) univSize() int {
	n := 0
	for _, nd := range h.plan.Nodes {
		n += nd.Host.Slots
	}
	return max(n, len(h.plan.Ranks))
}

// crossRanks are Horovod's cross ranks of the plan's nodes and cross
// sizes (env.CrossRanks), made once.
func (h *head) crossRanks() (rank [][]int, size []int) {
	h.crossOnce.Do(func() {
		sizes := make([]int, len(h.plan.Nodes))
		for k, n := range h.plan.Nodes {
			sizes[k] = len(n.Ranks)
		}
		h.crossRank, h.crossSize = env.CrossRanks(sizes)
	})
	return h.crossRank, h.crossSize
}

// pmixHosts are the node names a PMIx server needs, unless PMIx is off;
// made once, as every agent's Launch of every generation carries them.
func (h *head) pmixHosts() []string {
	if h.o.PMIx == PMIxOff {
		return nil
	}
	h.hostsOnce.Do(func() {
		h.hostNames = make([]string, len(h.plan.Nodes))
		for i, n := range h.plan.Nodes {
			h.hostNames[i] = n.Host.Name
		}
	})
	return h.hostNames
}

// dir is the ranks' working directory: --wdir, else gorun's own.
func (h *head) dir() string {
	if h.o.Dir != "" {
		return h.o.Dir
	}
	return cwd()
}

func cwd() string {
	d, err := os.Getwd()
	if err != nil {
		return "/"
	}
	return d
}

// printEnv asks the agent of the rank's host for the rank's environment.
func (h *head) printEnv(ctx context.Context) (int, error) {
	r := h.o.PrintEnv
	node := h.plan.Ranks[r].Node
	a := h.agents[node]
	l := h.launchFor(0, node, h.plan.Nodes[node], h.master, h.agents[0].hello.FreePort)
	l.PrintEnv = r + 1
	if err := a.w.Send(control.TypeLaunch, l); err != nil {
		return ExitLaunch, err
	}
	name := h.plan.Nodes[node].Host.Name
	for {
		e, err := h.nextEvent(ctx)
		if err != nil {
			return ExitLaunch, err
		}
		if lost, ok := e.(agentLost); ok && lost.node != node {
			return ExitLaunch, h.lostBeforeLaunch(lost)
		}
		if e.origin() != node {
			continue
		}
		switch e := e.(type) {
		case envReply:
			h.printEnvOf(e.Env)
			return ExitOK, nil
		case agentError:
			return ExitLaunch, fmt.Errorf("agent on %s: %s", name, e.msg)
		case agentLost:
			return ExitLaunch, fmt.Errorf("agent on %s: %w", name, e.err)
		}
	}
}

// printEnvOf prints a rank's environment, sorted, its secret redacted.
func (h *head) printEnvOf(e control.Env) {
	sort.Strings(e.Env)
	for _, kv := range e.Env {
		if strings.HasPrefix(kv, rendezvous.EnvSecret+"=") {
			// A throwaway secret (no job runs), but printed
			// environments end up in bug reports.
			kv = rendezvous.EnvSecret + "=<redacted>"
		}
		fmt.Fprintln(h.o.Stdout, kv)
	}
}

// pumpStdin copies gorun's stdin to one rank, a window at a time.
func (h *head) pumpStdin(a *agentConn, rank int) {
	if f, ok := h.o.Stdin.(*os.File); ok && inBackground(f) {
		a.w.SendStdin(control.Stdin{Rank: rank}) // reading would stop gorun (SIGTTIN)
		return
	}
	buf := make([]byte, stdinChunk)
	inflight := 0
	for {
		n, err := h.o.Stdin.Read(buf)
		if n > 0 {
			for inflight >= stdinWindow {
				<-a.acks
				inflight--
			}
			if a.w.SendStdin(control.Stdin{Rank: rank, Data: buf[:n]}) != nil {
				return
			}
			inflight++
		}
		if err != nil {
			a.w.SendStdin(control.Stdin{Rank: rank})
			return
		}
	}
}

// inBackground reports whether f is a terminal that gorun's process group
// does not own, where reading would stop gorun with SIGTTIN.
func inBackground(f *os.File) bool {
	fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return false // not a terminal
	}
	return fg != unix.Getpgrp()
}
