package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// pmiFD is the descriptor of a rank's end of its PMI-1 socketpair.
const pmiFD = 3

// hostFencer is the agent's side of the job-wide fence: one message per
// host crosses the control channel, and the head's store answers it.
type hostFencer struct {
	a   *agent
	gen int
}

var _ rendezvous.Fencer = (*hostFencer)(nil)

// Fence sends this host's puts to the head and waits for the fence.
func (f *hostFencer) Fence(ctx context.Context, puts map[string]string) (map[string]string, error) {
	a := f.a
	ch := make(chan control.FenceReply, 1)
	a.fenceMu.Lock()
	a.fenceSeq++
	seq := a.fenceSeq
	if a.fenceWait == nil {
		a.fenceWait = map[int]chan control.FenceReply{}
	}
	a.fenceWait[seq] = ch
	a.fenceMu.Unlock()
	defer func() {
		a.fenceMu.Lock()
		delete(a.fenceWait, seq)
		a.fenceMu.Unlock()
	}()
	if err := a.w.Send(control.TypeFence, control.Fence{Generation: f.gen, Seq: seq, Puts: puts}); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	select {
	case r := <-ch:
		if r.Err != "" {
			return nil, errors.New(r.Err)
		}
		return r.KVs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fenceDone hands the head's answer to the waiting fence.
func (a *agent) fenceDone(r control.FenceReply) {
	a.fenceMu.Lock()
	ch := a.fenceWait[r.Seq]
	a.fenceMu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// pmiState is one generation's PMI-1 server on this host.
type pmiState struct {
	srv    *rendezvous.PMIServer
	ctx    context.Context // ends the connections when the generation does
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startPMI makes the PMI-1 server of a launch's ranks.
func (a *agent) startPMI(l control.Launch) (*pmiState, error) {
	ranks := make([]int, len(l.Ranks))
	for i, s := range l.Ranks {
		ranks[i] = s.Rank
	}
	gen := l.Generation
	srv, err := rendezvous.NewPMIServer(rendezvous.PMIConfig{
		Size: l.WorldSize, Ranks: ranks, KVSName: l.PMI.KVSName, ProcessMapping: l.PMI.Mapping,
		Fencer: &hostFencer{a: a, gen: gen},
		OnAbort: func(rank, code int, msg string) {
			a.w.Send(control.TypeAbort, control.Abort{Generation: gen, Rank: rank, Code: code, Msg: msg})
		},
		OnEarlyExit: func(rank int) {
			a.w.Send(control.TypeAbort, control.Abort{Generation: gen, Rank: rank, Early: true})
		},
		Logf: a.log.printf,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &pmiState{srv: srv, ctx: ctx, cancel: cancel}, nil
}

// serve serves one rank's end of its socketpair.
func (p *pmiState) serve(f *os.File, rank int) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return
	}
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
