package pmixbridge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
)

// fake is a bridge Server that records what the agent's side sends.
type fake struct {
	mu     sync.Mutex
	start  *StartRequest
	done   []*FenceDone
	events chan *Event
}

func (f *fake) Start(_ context.Context, r *StartRequest) (*StartReply, error) {
	f.mu.Lock()
	f.start = r
	f.mu.Unlock()
	if r.Nspace == "" {
		return nil, errors.New("no nspace")
	}
	return &StartReply{Env: map[int][]string{2: {"PMIX_RANK=2", "PMIX_NAMESPACE=" + r.Nspace}}}, nil
}

func (f *fake) Events(ctx context.Context, send func(*Event) error) error {
	for {
		select {
		case e := <-f.events:
			if err := send(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (f *fake) FenceDone(_ context.Context, d *FenceDone) (*Empty, error) {
	f.mu.Lock()
	f.done = append(f.done, d)
	f.mu.Unlock()
	return &Empty{}, nil
}

func (f *fake) Rank(_ context.Context, q *RankQuery) (*RankState, error) {
	return &RankState{Connected: q.Rank == 2, Finalized: false}, nil
}

func (f *fake) Stop(context.Context, *RankQuery) (*Empty, error) { return &Empty{}, nil }

// The service round-trips every call and the event stream over real gRPC
// with gorun's JSON codec, binary fence data included.
func TestBridgeOverGRPC(t *testing.T) {
	f := &fake{events: make(chan *Event, 4)}
	client, server := plugin.TestPluginGRPCConn(t, false, PluginSet(f))
	defer client.Close()
	defer server.Stop()
	raw, err := client.Dispense(Name)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.(*Client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rep, err := c.Start(ctx, &StartRequest{Nspace: "gorun.j.0", Hosts: []string{"a", "b"}, NodeOf: []int{0, 0, 1, 1}, Node: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Env[2]; len(got) != 2 || got[1] != "PMIX_NAMESPACE=gorun.j.0" {
		t.Errorf("env of rank 2: %q", got)
	}
	if f.start == nil || len(f.start.NodeOf) != 4 || f.start.Hosts[1] != "b" {
		t.Errorf("the plugin got %+v", f.start)
	}
	if _, err := c.Start(ctx, &StartRequest{}); err == nil {
		t.Error("a failing Start returned no error")
	}

	blob := []byte{0, 1, 2, 0xff, 0, 'x'}
	f.events <- &Event{Kind: "fence", Nspace: "gorun.j.0", ID: 7, Data: blob}
	f.events <- &Event{Kind: "abort", Nspace: "gorun.j.0", Rank: 3, Status: 9, Msg: "bye"}
	got := make(chan *Event, 4)
	ectx, ecancel := context.WithCancel(ctx)
	go c.Events(ectx, func(e *Event) { got <- e })
	e1, e2 := <-got, <-got
	ecancel()
	if e1.Kind != "fence" || e1.ID != 7 || string(e1.Data) != string(blob) {
		t.Errorf("fence event: %+v", e1)
	}
	if e2.Kind != "abort" || e2.Rank != 3 || e2.Status != 9 || e2.Msg != "bye" {
		t.Errorf("abort event: %+v", e2)
	}
	if err := c.FenceDone(ctx, &FenceDone{ID: 7, Data: blob}); err != nil {
		t.Fatal(err)
	}
	if len(f.done) != 1 || string(f.done[0].Data) != string(blob) {
		t.Errorf("fence done: %+v", f.done)
	}
	st, err := c.Rank(ctx, "gorun.j.0", 2)
	if err != nil || !st.Connected || st.Finalized {
		t.Errorf("rank state: %+v, %v", st, err)
	}
}
