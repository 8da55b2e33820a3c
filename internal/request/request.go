// Package request is the Request implementation shared by gorun's built-in
// transports: a completion that happens once, that Test and Wait consume
// once, and that a transport may drive by polling while Wait spins.
package request

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/transport"
)

const (
	pending uint32 = iota
	completing
	done
	consumed
)

// Poller lets Wait make progress itself for a while before it parks, and
// lets Test make progress once. A nil Poller means the transport makes all
// progress in its own goroutines.
type Poller interface {
	// Poll makes progress without blocking and reports whether it did
	// any work.
	Poll() bool
	// Spin is how long Wait keeps polling after the last useful Poll
	// before it parks.
	Spin() time.Duration
	// Parking is called when a Wait stops polling and is about to park,
	// Polling when one starts: the transport keeps track so that it knows
	// whether a peer must wake it.
	Polling()
	Parking()
}

// Idler is a Poller that asks its peer to wake it only while a Wait is
// parked on it, not whenever no Wait polls: between the calls of a rank
// that is busy, a peer's eager message waits in the ring for the next
// poll, and ringing for it (a system call, and a thread woken on the
// rank's side that takes a CPU from it) would cost more than the message.
//
// A Wait that stops polling calls Idle, not Parking; one that then parks
// calls Blocking before and Unblocked after, unless its request was made
// a background one (SetBackground): a Wait for messages that may never
// come, such as a watcher's for control messages, which then arrive with
// the next poll or the next Wait that parks.
type Idler interface {
	Poller
	Idle()
	Blocking()
	Unblocked()
}

// Request is a transport.Request. The zero value is a pending request
// that its transport makes all progress for; New and Reset give it a
// Poller.
type Request struct {
	state atomic.Uint32
	mu    sync.Mutex    // orders a parking Wait's ch against Complete
	ch    chan struct{} // made by the first Wait that parks and kept; Complete puts a token in it
	n     int
	err   error
	p     Poller
	bg    bool // a background request: its Wait does not ask to be woken
}

var _ transport.Request = (*Request)(nil)

// New returns a pending request that Wait drives with p (which may be nil).
func New(p Poller) *Request {
	return &Request{p: p}
}

// Reset makes a request that was consumed (Test or Wait reported it
// done) pending again, to be driven with p: a transport that keeps its
// requests for reuse calls it, once the request's user handed it back.
// The channel a parked Wait made stays, emptied.
func (r *Request) Reset(p Poller) {
	r.state.Store(pending)
	r.n, r.err, r.p, r.bg = 0, nil, p, false
	if r.ch != nil {
		select {
		case <-r.ch:
		default:
		}
	}
}

// SetDone makes a new or reset request complete with n and err, for a
// transfer done as it was posted.
func (r *Request) SetDone(n int, err error) {
	r.n, r.err = n, err
	r.state.Store(done)
}

// Consumed reports whether Test or Wait reported the request done: its
// user is finished with it.
func (r *Request) Consumed() bool { return r.state.Load() == consumed }

// Complete completes the request with n and err and reports whether this
// call did it (only the first call does, and none on a request made
// complete by SetDone).
func (r *Request) Complete(n int, err error) bool {
	if !r.state.CompareAndSwap(pending, completing) {
		return false
	}
	r.n, r.err = n, err
	// A Wait that parks makes ch while the request is pending; from
	// completing on it waits for done instead. Storing done is the last
	// touch of r: whoever sees it may reuse the request at once.
	r.mu.Lock()
	ch := r.ch
	r.mu.Unlock()
	r.state.Store(done)
	if ch != nil {
		// A token, not a close, so that the channel serves the request's
		// next use too. It may land after that use began (the request
		// was reused as soon as done was seen): a Wait that wakes to a
		// stale token finds its request pending and parks again.
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return true
}

// Pending reports whether the request is not complete yet.
func (r *Request) Pending() bool { return r.state.Load() < done }

// take consumes a completed request.
func (r *Request) take() (int, error) {
	if r.state.CompareAndSwap(done, consumed) {
		return r.n, r.err
	}
	return 0, transport.ErrRequestDone
}

// Test implements transport.Request.
func (r *Request) Test() (bool, int, error) {
	switch r.state.Load() {
	case pending, completing:
		if r.p == nil || !r.p.Poll() || r.Pending() {
			return false, 0, nil
		}
	case consumed:
		return true, 0, transport.ErrRequestDone
	}
	n, err := r.take()
	return true, n, err
}

// SetBackground makes the request's Wait a background one (see Idler):
// it does not ask the peer to wake it when it parks. Its owner calls it
// before it waits; Reset undoes it.
func (r *Request) SetBackground() { r.bg = true }

// Wait implements transport.Request.
func (r *Request) Wait(ctx context.Context) (int, error) {
	if s := r.state.Load(); s == consumed {
		return 0, transport.ErrRequestDone
	} else if s == pending && r.p != nil {
		r.spin(ctx)
	}
	if id, ok := r.p.(Idler); ok && !r.bg && r.Pending() {
		id.Blocking()
		defer id.Unblocked()
	}
	// A channel only for a Wait that parks: most requests complete while
	// one spins, or before anyone waits.
	for r.Pending() {
		r.mu.Lock()
		if r.state.Load() != pending {
			// Complete has begun and will not look at ch again.
			r.mu.Unlock()
			for r.Pending() {
				runtime.Gosched()
			}
			break
		}
		if r.ch == nil {
			r.ch = make(chan struct{}, 1)
		}
		ch := r.ch
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return r.take()
}

// spin polls until the request is done, ctx ends, or Spin passes without
// progress. Whatever it returns with, it has told the Poller that it
// stopped polling (Parking, or Idle for an Idler, which Wait then tells
// Blocking if it parks): the transport's own goroutine is watching again.
func (r *Request) spin(ctx context.Context) {
	limit := r.p.Spin()
	if limit <= 0 {
		return
	}
	r.p.Polling()
	if id, ok := r.p.(Idler); ok {
		defer id.Idle()
	} else {
		defer r.p.Parking()
	}
	last := time.Now()
	for i := 0; r.Pending(); i++ {
		if r.p.Poll() {
			last = time.Now()
			continue
		}
		if i&63 == 63 {
			if ctx.Err() != nil || time.Since(last) > limit {
				return
			}
		}
		runtime.Gosched()
	}
}
