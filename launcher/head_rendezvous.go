package launcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// The head's part in the ranks' rendezvous: MASTER_ADDR, the job-wide
// key-value store and its fences.

// masterAddr picks MASTER_ADDR: an address of rank 0's host that the
// other hosts reach, chosen by rank 0's own routing table (or --iface).
func (h *head) masterAddr(ctx context.Context) (string, error) {
	a0 := h.agents[0]
	var peers []string
	unknown := false // an agent of another host whose addresses no connection says
	for _, a := range h.agents[1:] {
		switch {
		case a.hello.ConnAddr != "":
			peers = append(peers, a.hello.ConnAddr)
		case a0.hello.ClientAddr != "":
			peers = append(peers, a0.hello.ClientAddr) // a local node: the head's host
		case a.remote:
			unknown = true // started through a batch system's launcher (blaunch, qrsh, flux exec)
		}
	}
	if h.o.Iface == "" && len(peers) == 0 {
		if a0.hello.ConnAddr != "" {
			return a0.hello.ConnAddr, nil
		}
		if !unknown && !a0.remote {
			return "127.0.0.1", nil // one machine
		}
		// No peers: rank 0's agent answers with its default route's
		// address, as the head listens on for Slurm's agents.
	}
	if err := a0.w.Send(control.TypeRoute, control.Route{Peers: peers, Iface: h.o.Iface}); err != nil {
		return "", err
	}
	for {
		e, err := h.nextEvent(ctx)
		if err != nil {
			return "", err
		}
		if lost, ok := e.(agentLost); ok && lost.node != 0 {
			// No rank has started, and now one host's cannot.
			return "", h.lostBeforeLaunch(lost)
		}
		if e.origin() != 0 {
			continue
		}
		switch e := e.(type) {
		case routeReply:
			if e.Err != "" {
				return "", fmt.Errorf("MASTER_ADDR on %s: %s", h.plan.Nodes[0].Host.Name, e.Err)
			}
			return e.Addr, nil
		case agentLost:
			return "", e.err
		}
	}
}

// newStore makes the job-wide key-value store and PMI's process mapping.
func (h *head) newStore() error {
	var err error
	h.store, err = rendezvous.NewStore(len(h.plan.Nodes), rendezvous.StoreOptions{FenceTimeout: storeFenceTimeout(h.o.RendezvousTimeout),
		Budget: rendezvous.Budget{Keys: h.o.KVJobBudget.Keys, Bytes: h.o.KVJobBudget.Bytes, Setting: JobBudgetSetting}})
	if err != nil {
		return err
	}
	nodeOf := make([]int, len(h.plan.Ranks))
	for r, p := range h.plan.Ranks {
		nodeOf[r] = p.Node
	}
	h.mapping, _ = rendezvous.ProcessMappingOf(nodeOf)
	return nil
}

// storeFenceTimeout is the job-wide fence's bound: a tenth longer than
// the hosts' local barriers', so that a host whose ranks arrived in part
// names its missing ranks before the store names whole hosts.
func storeFenceTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + d/10
}

// answerFence enters a host's fence into the store, and answers the host
// when every host has reached it, or the fence failed.
//
// In a launch tree the agent fences for its subtree (f.Nodes), and passes
// the answer down. The answer is the same for every host: it is encoded
// once per fence, and the same bytes go to every agent that asks.
//
// A spawned job's fence (f.Job) is its own store's, whose members are the
// hosts of its ranks (f.Nodes holds the host's member number).
func (h *head) answerFence(ctx context.Context, st *rendezvous.Store, node int, f control.Fence) {
	members := f.Nodes
	if len(members) == 0 {
		members = []int{node}
	}
	kvs, err := st.FenceMany(ctx, f.Generation, members, f.Puts)
	w := h.agents[node].w
	if err != nil {
		if f.Job == 0 {
			h.fenceTimedOut(f.Generation, err)
		}
		w.SendPayload(control.TypeFenceRe, control.EncodeFenceReply(control.FenceReply{Generation: f.Generation, Job: f.Job, Seq: f.Seq, Err: err.Error()}))
		return
	}
	payload, err := h.fenceAnswer(f.Generation, f.Job, f.Seq, kvs)
	if err == nil {
		err = w.SendPayload(control.TypeFenceRe, payload)
	}
	if errors.Is(err, control.ErrProtocol) {
		// More than one frame carries: fail the fence rather than leave
		// the host waiting for it.
		w.SendPayload(control.TypeFenceRe, control.EncodeFenceReply(control.FenceReply{Generation: f.Generation, Job: f.Job, Seq: f.Seq,
			Err: fmt.Sprintf("the fence's key-values cannot reach %s: %v", h.plan.Nodes[node].Host.Name, err)}))
	}
}

// fenceAnswer is the encoded answer of a generation's (or its spawned
// job's) fence number seq, made by the first host's answer and kept for
// the others (until the next fence's).
func (h *head) fenceAnswer(gen, job, seq int, kvs map[string]string) ([]byte, error) {
	h.fenceMu.Lock()
	defer h.fenceMu.Unlock()
	key := [3]int{gen, job, seq}
	if h.fenceKey != key || h.fenceBytes == nil {
		if gen == h.o.FirstGeneration && job == 0 && seq == 0 {
			h.firstFence.CompareAndSwap(0, int64(time.Since(h.start)))
		}
		h.fenceKey = key
		h.fenceBytes = control.EncodeFenceReply(control.FenceReply{Generation: gen, Job: job, Seq: seq, KVs: rendezvous.EncodePublished(kvs)})
	}
	return h.fenceBytes, nil
}

// fenceTimedOut turns the store's fence timeout, which names hosts, into
// an abort that names their ranks: none of them arrived (a host whose ranks
// arrived in part reports its own missing ones, from its local barrier).
func (h *head) fenceTimedOut(gen int, err error) {
	var te *rendezvous.FenceTimeoutError
	if !errors.As(err, &te) || len(te.Missing) == 0 {
		return
	}
	var ranks []int
	for r, p := range h.plan.Ranks {
		if slices.Contains(te.Missing, p.Node) {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) == 0 {
		return
	}
	select {
	case h.events <- rankAborted{fromAgent{te.Missing[0]}, control.Abort{Generation: gen, Rank: ranks[0], Missing: ranks, Timeout: te.Timeout}}:
	case <-h.done:
	}
}

// rankList names ranks with their hosts: "2, 3 (on h2)".
func (h *head) rankList(ranks []int) string {
	var b strings.Builder
	for i, r := range ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 16 {
			fmt.Fprintf(&b, "and %d more", len(ranks)-i)
			break
		}
		fmt.Fprintf(&b, "%d (on %s)", r, h.plan.Nodes[h.plan.Ranks[r].Node].Host.Name)
	}
	return b.String()
}
