package simcluster

import (
	"errors"
	"io"
	"sync"
	"time"
)

// ErrCut is what a link's ends return once the link was cut (a host
// crashed, or the head killed an agent).
var ErrCut = errors.New("simcluster: link cut")

// half is one direction of a link: bytes written at one end arrive at the
// other after the link's latency, and no faster than its bandwidth
// allows, in order. Writes never block (the queue is the network's and
// the receiver's buffers together).
type half struct {
	lat time.Duration
	bw  float64 // bytes per second; 0 = unlimited

	mu     sync.Mutex
	q      []chunk
	busy   time.Time // when the link has sent what is queued
	closed bool      // the writer closed: EOF once q is read
	cut    bool
	wake   chan struct{}
}

type chunk struct {
	b  []byte
	at time.Time // when it arrives
}

func newHalf(lat time.Duration, bw float64) *half {
	return &half{lat: lat, bw: bw, wake: make(chan struct{}, 1)}
}

func (h *half) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *half) write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cut {
		return 0, ErrCut
	}
	if h.closed {
		return 0, io.ErrClosedPipe
	}
	now := time.Now()
	start := now
	if h.busy.After(now) {
		start = h.busy
	}
	if h.bw > 0 {
		start = start.Add(time.Duration(float64(len(p)) / h.bw * float64(time.Second)))
	}
	h.busy = start
	h.q = append(h.q, chunk{b: append([]byte(nil), p...), at: start.Add(h.lat)})
	h.signal()
	return len(p), nil
}

func (h *half) read(p []byte) (int, error) {
	for {
		h.mu.Lock()
		if h.cut {
			h.mu.Unlock()
			return 0, ErrCut
		}
		if len(h.q) == 0 {
			closed := h.closed
			h.mu.Unlock()
			if closed {
				return 0, io.EOF
			}
			<-h.wake
			continue
		}
		c := &h.q[0]
		if wait := time.Until(c.at); wait > 0 {
			h.mu.Unlock()
			time.Sleep(wait)
			continue
		}
		n := copy(p, c.b)
		c.b = c.b[n:]
		if len(c.b) == 0 {
			h.q[0] = chunk{}
			h.q = h.q[1:]
		}
		if len(h.q) > 0 || h.closed || h.cut {
			h.signal()
		}
		h.mu.Unlock()
		return n, nil
	}
}

func (h *half) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.signal()
}

func (h *half) breakOff() {
	h.mu.Lock()
	h.cut = true
	h.q = nil
	h.mu.Unlock()
	h.signal()
}

// End is one end of a link: it reads what the other end wrote, and
// writes what the other end reads.
type End struct {
	in, out *half
}

// Link makes a duplex link with the given one-way latency and bandwidth
// per direction (bytes per second, 0 = unlimited), and returns its ends.
func Link(latency time.Duration, bandwidth float64) (a, b *End) {
	x, y := newHalf(latency, bandwidth), newHalf(latency, bandwidth)
	return &End{in: x, out: y}, &End{in: y, out: x}
}

// Read reads what the other end wrote, once it has arrived.
func (e *End) Read(p []byte) (int, error) { return e.in.read(p) }

// Write sends p to the other end.
func (e *End) Write(p []byte) (int, error) { return e.out.write(p) }

// Close ends this end's writing: the other end reads EOF after the rest.
func (e *End) Close() error {
	e.out.close()
	return nil
}

// Cut breaks the link in both directions at once, as a crash or a cable
// pulled would: both ends' reads and writes fail with ErrCut.
func (e *End) Cut() {
	e.in.breakOff()
	e.out.breakOff()
}
