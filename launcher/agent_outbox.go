package launcher

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/gorun/gorun/launcher/control"
)

// outbox holds the frames the agent's loop sends to the head, and writes
// them in order from a goroutine of its own (run). A handler never waits
// on the head's connection: a link that stalls (cut, and half-open) must
// not keep the loop from noticing that the head went silent and stopping
// the ranks.
type outbox struct {
	w      *control.Writer
	mu     sync.Mutex
	q      []outFrame
	closed bool          // no more frames
	wake   chan struct{} // run has frames to write, or should end
	done   chan struct{} // closed when run has ended
}

// outFrame is a frame in the outbox: its type and its payload.
type outFrame struct {
	t       control.Type
	payload []byte
}

func newOutbox(w *control.Writer) *outbox {
	return &outbox{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// send queues a JSON message of type t (v nil: no payload). A message
// that does not encode is dropped, as control.Writer.Send fails it.
func (o *outbox) send(t control.Type, v any) {
	var p []byte
	if v != nil {
		var err error
		if p, err = json.Marshal(v); err != nil {
			return
		}
	}
	o.mu.Lock()
	if !o.closed {
		o.q = append(o.q, outFrame{t, p})
	}
	o.mu.Unlock()
	o.poke()
}

func (o *outbox) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns the frames queued, and whether the outbox is closed.
func (o *outbox) take() ([]outFrame, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.q
	o.q = nil
	return q, o.closed
}

// run writes the queued frames until the outbox is closed and empty. A
// failed write fails the ones after it at once (the writer keeps its
// error).
func (o *outbox) run() {
	defer close(o.done)
	for range o.wake {
		q, closed := o.take()
		for _, f := range q {
			o.w.SendPayload(f.t, f.payload)
		}
		if closed && len(q) == 0 {
			return
		}
		if closed {
			o.poke()
		}
	}
}

// close takes no more frames, and waits at most wait for run to write
// those queued.
func (o *outbox) close(wait time.Duration) {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.poke()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
	}
}
