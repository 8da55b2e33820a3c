package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// pmiFD is the descriptor of a rank's end of its PMI-1 socketpair.
const pmiFD = 3

// hostFencer is the agent's side of the job-wide fence: one message per
// host crosses the control channel, and the head's store answers it. A
// spawned job's fences (job > 0) have their own store at the head, whose
// members are the hosts of its ranks: node is then this host's index
// among them, and the fence goes straight up, not through a launch tree.
type hostFencer struct {
	a    *agent
	gen  int
	job  int // the spawned job (control.Spawned.Job); 0: the generation's
	node int // this host's node number (its member number in a spawned job's fences)
}

var _ rendezvous.Fencer = (*hostFencer)(nil)

// fenceKey identifies a fence the agent waits on: generation, job, number.
type fenceKey [3]int

// Fence sends this host's puts to the head, through the agent's loop
// (fenceCalled), and waits for the fence.
func (f *hostFencer) Fence(ctx context.Context, puts map[string]string) (*rendezvous.Published, error) {
	ch := make(chan control.FenceReply, 1)
	if err := f.a.post(ctx, fenceCalled{gen: f.gen, job: f.job, node: f.node, puts: puts, reply: ch}); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	select {
	case r := <-ch:
		if r.Err != "" {
			return nil, errors.New(r.Err)
		}
		kvs, err := rendezvous.DecodePublished(r.KVs)
		if err != nil {
			return nil, fmt.Errorf("fence: the head's answer: %w", err)
		}
		return kvs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.a.quit:
		return nil, fmt.Errorf("fence: %w", errAgentEnded)
	}
}

// pmiState is one generation's rendezvous servers on this host: PMI-1 for
// MPICH ranks (a socketpair each) and gorun's KV protocol for Go ranks (a
// unix socket in the agent's private directory).
type pmiState struct {
	srv    *rendezvous.PMIServer
	kv     *rendezvous.KVServer
	sock   string          // the KV socket's path; "" when there is none
	ctx    context.Context // ends the connections when the generation does
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startPMI makes the PMI-1 server of a launch's ranks: the generation's,
// or a spawned job's (l.Spawned), whose ranks' numbers in the job's frames
// start at its Base.
func (a *agent) startPMI(l control.Launch) (*pmiState, error) {
	ranks := make([]int, len(l.Ranks))
	var apps map[int]int // MPMD: each rank's app, for PMI_Get_appnum
	for i, s := range l.Ranks {
		ranks[i] = s.Rank
		if len(l.Apps) > 0 {
			if apps == nil {
				apps = make(map[int]int, len(l.Ranks))
			}
			apps[s.Rank] = s.App
		}
	}
	gen := l.Generation
	// ctx ends the connections, and the requests to the head that they
	// wait on, when the server closes.
	ctx, cancel := context.WithCancel(context.Background())
	fencer := &hostFencer{a: a, gen: gen, node: l.NodeRank}
	base, preput := 0, map[string]string(nil)
	if sp := l.Spawned; sp != nil {
		fencer.job, fencer.node, base, preput = sp.Job, slices.Index(sp.Nodes, l.NodeRank), sp.Base, sp.Preput
	}
	srv, err := rendezvous.NewPMIServer(rendezvous.PMIConfig{
		Size: l.WorldSize, Ranks: ranks, KVSName: l.PMI.KVSName, ProcessMapping: l.PMI.Mapping, AppNums: apps,
		UniverseSize: l.PMI.UnivSize, Preload: preput,
		Fencer: fencer,
		OnAbort: func(rank, code int, msg string) {
			a.w.Send(control.TypeAbort, control.Abort{Generation: gen, Rank: base + rank, Code: code, Msg: msg})
		},
		OnEarlyExit: func(rank int) {
			a.w.Send(control.TypeAbort, control.Abort{Generation: gen, Rank: base + rank, Early: true})
		},
		Names: func(rank int, op, service, port string) (string, error) {
			return a.pmiName(ctx, gen, l.PMI.KVSName, rank, op, service, port)
		},
		Spawn: func(rank int, sp rendezvous.PMISpawn) error {
			return a.pmiSpawn(ctx, gen, l.PMI.KVSName, rank, sp)
		},
		FenceTimeout: l.PMI.FenceTimeout, OnFenceTimeout: a.fenceTimedOut(gen, base, l.PMI.FenceTimeout),
		RankBudget: rankBudget(l), JobBudget: jobBudget(l),
		Logf: a.log.printf,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	p := &pmiState{srv: srv, ctx: ctx, cancel: cancel}
	if l.Spawned != nil {
		return p, nil // Go ranks rendezvous over the generation's socket only
	}
	if err := a.startKV(p, l, ranks); err != nil {
		a.log.printf("rendezvous socket: %v", err)
	}
	return p, nil
}

// startKV serves gorun's KV protocol to the generation's ranks on a socket
// in the agent's private directory (made once, mode 0700, removed when the
// agent ends); ranks must present the job's secret.
func (a *agent) startKV(p *pmiState, l control.Launch, ranks []int) error {
	if len(l.Secret) < 16 {
		return nil // an older head: no secret, no socket
	}
	if err := a.ensureSockDir(); err != nil {
		return err
	}
	gen := l.Generation
	kv, err := rendezvous.NewKVServer(rendezvous.KVConfig{
		Secret: []byte(l.Secret), Ranks: ranks, Fencer: &hostFencer{a: a, gen: gen, node: l.NodeRank},
		OnEarlyExit: func(rank int) {
			a.w.Send(control.TypeAbort, control.Abort{Generation: gen, Rank: rank, Early: true,
				Msg: "closed its rendezvous connection (GORUN_AGENT_SOCKET) without Close"})
		},
		FenceTimeout: l.PMI.FenceTimeout, OnFenceTimeout: a.fenceTimedOut(gen, 0, l.PMI.FenceTimeout),
		RankBudget: rankBudget(l), JobBudget: jobBudget(l), Logf: a.log.printf,
	})
	if err != nil {
		return err
	}
	if _, err := kv.Listen(p.ctx, a.sockDir, kvSockName(gen)); err != nil {
		return err
	}
	p.kv, p.sock = kv, filepath.Join(a.sockDir, kvSockName(gen))
	return nil
}

// rankBudget and jobBudget are a launch's rendezvous budgets (zero
// fields: the defaults), with the settings that raise them.
func rankBudget(l control.Launch) rendezvous.Budget {
	return rendezvous.Budget{Keys: l.PMI.RankBudget.Keys, Bytes: l.PMI.RankBudget.Bytes, Setting: RankBudgetSetting}
}

func jobBudget(l control.Launch) rendezvous.Budget {
	return rendezvous.Budget{Keys: l.PMI.JobBudget.Keys, Bytes: l.PMI.JobBudget.Bytes, Setting: JobBudgetSetting}
}

// kvSockName is the name of a generation's KV socket in the agent's
// directory.
func kvSockName(gen int) string { return "kv-" + strconv.Itoa(gen) + ".sock" }

// ensureSockDir makes the agent's private socket directory (mode 0700),
// once; shutdown removes it.
func (a *agent) ensureSockDir() error {
	a.awaitPrep()
	return a.makeSockDir()
}

// makeSockDir is ensureSockDir, without waiting for the preparation that
// runs it.
func (a *agent) makeSockDir() error {
	if a.sockDir != "" {
		return nil
	}
	dir, err := rendezvous.SocketDir("")
	if err != nil {
		return err
	}
	a.sockDir = dir
	return nil
}

// serve serves one rank's end of its socketpair.
func (p *pmiState) serve(f *os.File, rank int) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return
	}
	p.serveConn(c, rank)
}

// serveConn serves one rank's PMI-1 connection.
func (p *pmiState) serveConn(c net.Conn, rank int) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.srv.ServeConn(p.ctx, c, rank)
	}()
}

// close ends the server and its connections.
func (p *pmiState) close() {
	if p == nil {
		return
	}
	p.cancel()
	p.srv.Close()
	if p.kv != nil {
		p.kv.Close()
		os.Remove(p.sock)
	}
}

// socket is the KV socket's path ("" when there is none).
func (p *pmiState) socket() string {
	if p == nil {
		return ""
	}
	return p.sock
}

// fenceTimedOut reports local ranks that never reached a barrier (of a
// job whose ranks are numbered from base in the job's frames).
func (a *agent) fenceTimedOut(gen, base int, d time.Duration) func([]int) {
	return func(missing []int) {
		if len(missing) > 0 {
			ids := make([]int, len(missing))
			for i, r := range missing {
				ids[i] = base + r
			}
			a.w.Send(control.TypeAbort, control.Abort{Generation: gen, Rank: ids[0], Missing: ids, Timeout: d})
		}
	}
}

// socketpair returns the agent's and the rank's ends of a PMI socketpair.
func socketpair(rank int) (mine, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("PMI socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "pmi-"+strconv.Itoa(rank)), os.NewFile(uintptr(fds[1]), "pmi-rank-"+strconv.Itoa(rank)), nil
}

// kvsName is the PMI KVS name of a job's generation.
func kvsName(jobID string, gen int) string { return "kvs_" + jobID + "_" + strconv.Itoa(gen) }
