package request

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
)

func TestCompleteOnce(t *testing.T) {
	r := New(nil)
	if done, _, _ := r.Test(); done {
		t.Fatal("a new request is done")
	}
	var wg sync.WaitGroup
	wins := make(chan int, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.Complete(i, nil) {
				wins <- i
			}
		}()
	}
	wg.Wait()
	close(wins)
	if len(wins) != 1 {
		t.Fatalf("%d Complete calls won", len(wins))
	}
	want := <-wins
	if n, err := r.Wait(context.Background()); n != want || err != nil {
		t.Fatalf("Wait = %d, %v; want %d", n, err, want)
	}
	if _, err := r.Wait(context.Background()); !errors.Is(err, transport.ErrRequestDone) {
		t.Fatalf("second Wait = %v", err)
	}
	if done, _, err := r.Test(); !done || !errors.Is(err, transport.ErrRequestDone) {
		t.Fatalf("Test after Wait = %v, %v", done, err)
	}
	d := new(Request)
	d.SetDone(3, nil)
	if done, n, err := d.Test(); !done || n != 3 || err != nil || d.Complete(4, nil) {
		t.Fatalf("Done request: %v %d %v", done, n, err)
	}
}

// poller completes a request after some polls.
type poller struct {
	r       *Request
	polls   int
	polling int
	spin    time.Duration
}

func (p *poller) Poll() bool {
	p.polls++
	if p.polls == 5 {
		p.r.Complete(7, nil)
		return true
	}
	return false
}
func (p *poller) Spin() time.Duration { return p.spin }
func (p *poller) Polling()            { p.polling++ }
func (p *poller) Parking()            { p.polling-- }

func TestSpin(t *testing.T) {
	p := &poller{spin: time.Second}
	p.r = New(p)
	if n, err := p.r.Wait(context.Background()); n != 7 || err != nil || p.polls != 5 || p.polling != 0 {
		t.Fatalf("Wait = %d, %v after %d polls, polling %d", n, err, p.polls, p.polling)
	}
	// Test polls once.
	p = &poller{polls: 3}
	p.r = New(p)
	if done, _, _ := p.r.Test(); done {
		t.Fatal("done after the 4th poll")
	}
	if done, n, _ := p.r.Test(); !done || n != 7 {
		t.Fatal("not done after the 5th poll")
	}
	// A Wait that spins in vain parks, and ends with its context.
	p = &poller{polls: -1 << 30, spin: time.Millisecond}
	p.r = New(p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || p.polling != 0 {
		t.Fatalf("Wait = %v, polling %d", err, p.polling)
	}
}

// idler is a poller that is a request.Idler and records its calls.
type idler struct {
	poller
	calls []string
}

func (p *idler) Polling()   { p.poller.Polling(); p.calls = append(p.calls, "polling") }
func (p *idler) Parking()   { p.poller.Parking(); p.calls = append(p.calls, "parking") }
func (p *idler) Idle()      { p.poller.Parking(); p.calls = append(p.calls, "idle") }
func (p *idler) Blocking()  { p.calls = append(p.calls, "blocking") }
func (p *idler) Unblocked() { p.calls = append(p.calls, "unblocked") }

// An Idler hears why a Wait stops polling: Idle when it is done, Idle
// then Blocking and Unblocked around a park, and no Blocking for a
// background request or one that is done before it would park.
func TestIdler(t *testing.T) {
	tests := []struct {
		name  string
		polls int           // polls before the one that completes
		spin  time.Duration // the Poller's Spin
		bg    bool
		want  string
	}{
		{"done while spinning", 0, time.Second, false, "polling idle"},
		{"parks", -1 << 30, time.Millisecond, false, "polling idle blocking unblocked"},
		{"parks without spinning", -1 << 30, 0, false, "blocking unblocked"},
		{"background parks", -1 << 30, time.Millisecond, true, "polling idle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &idler{poller: poller{polls: tt.polls, spin: tt.spin}}
			r := New(p)
			p.r = r
			if tt.bg {
				r.SetBackground()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			r.Wait(ctx)
			if got := strings.Join(p.calls, " "); got != tt.want || p.polling != 0 {
				t.Errorf("calls %q (polling %d), want %q", got, p.polling, tt.want)
			}
		})
	}
	// Reset makes a background request an ordinary one again.
	p := &idler{poller: poller{polls: -1 << 30, spin: 0}}
	r := New(p)
	r.SetBackground()
	r.Complete(1, nil)
	r.Wait(context.Background())
	r.Reset(p)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	r.Wait(ctx)
	if got := strings.Join(p.calls, " "); got != "blocking unblocked" {
		t.Errorf("after Reset: calls %q, want a parked Wait's", got)
	}
}

// A reused request keeps the channel its parked Wait made: a Complete of
// its last use may put its token there after the request was handed back
// and reset, and the next use's Wait must not take that stale token for
// its own completion.
func TestReuseStaleToken(t *testing.T) {
	r := New(nil)
	waited := make(chan error, 1)
	go func() { _, err := r.Wait(context.Background()); waited <- err }()
	time.Sleep(10 * time.Millisecond) // let the Wait park and make its channel
	r.Complete(1, nil)
	if err := <-waited; err != nil {
		t.Fatalf("first use: Wait = %v", err)
	}
	r.Reset(nil)
	r.ch <- struct{}{} // a late token of the first use
	var n int
	go func() {
		var err error
		n, err = r.Wait(context.Background())
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("second use: Wait returned (%v) before Complete", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.Complete(2, nil)
	if err := <-waited; err != nil || n != 2 {
		t.Fatalf("second use: Wait = %d, %v; want 2, nil", n, err)
	}
	if ch := r.ch; ch == nil || cap(ch) != 1 {
		t.Errorf("the parked Wait's channel was not kept: %v", ch)
	}
}
