package tcp

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorun/gorun/transport"
)

// Frame types; see the package documentation.
const (
	frameSize = 32

	fEager  = 'E'
	fRTS    = 'R'
	fCTS    = 'C'
	fData   = 'D'
	fCredit = 'K'
)

// frame is a decoded frame header: its type and three fields whose meaning
// depends on the type.
type frame struct {
	typ     byte
	a, b, c uint64
}

func (f frame) put(b *[frameSize]byte) {
	*b = [frameSize]byte{0: f.typ}
	binary.LittleEndian.PutUint64(b[8:], f.a)
	binary.LittleEndian.PutUint64(b[16:], f.b)
	binary.LittleEndian.PutUint64(b[24:], f.c)
}

func decodeFrame(b *[frameSize]byte) (frame, error) {
	f := frame{
		typ: b[0],
		a:   binary.LittleEndian.Uint64(b[8:]),
		b:   binary.LittleEndian.Uint64(b[16:]),
		c:   binary.LittleEndian.Uint64(b[24:]),
	}
	for _, x := range b[1:8] {
		if x != 0 {
			return f, fmt.Errorf("%w: frame header % x", transport.ErrProtocol, b[:8])
		}
	}
	return f, nil
}

// readFrame reads one frame header. It returns io.EOF only when the stream
// ended cleanly between frames.
func readFrame(r io.Reader, b *[frameSize]byte) (frame, error) {
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return frame{}, err
	}
	return decodeFrame(b)
}

// job is a frame to write and the bytes that follow it.
type job struct {
	hdr  [frameSize]byte
	data []byte
	req  *sendReq // told when the write is done; nil for control frames
}

// writer writes one stream's jobs in order from its own goroutine, several
// queued jobs per writev.
type writer struct {
	c      *net.TCPConn
	done   func(*sendReq)
	fail   func(error)
	mu     sync.Mutex
	q      []job
	stop   bool
	busy   bool           // a write is in progress, by run or by a caller (reserve)
	inline sync.WaitGroup // writes by callers in progress
	wake   chan struct{}
	exited chan struct{}
	ibuf   []byte // an inline write's frame and data, copied: one write(2), no allocation
	ihdr   [frameSize]byte
}

// inlineCopy is the largest inline write whose data is copied behind its
// frame for one write(2); larger ones go out with writev, which allocates.
const inlineCopy = 16 << 10

func newWriter(c *net.TCPConn, done func(*sendReq), fail func(error)) *writer {
	return &writer{c: c, done: done, fail: fail, wake: make(chan struct{}, 1), exited: make(chan struct{})}
}

func (w *writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// push queues j and reports whether the writer still runs.
func (w *writer) push(j job) bool {
	w.mu.Lock()
	if w.stop {
		w.mu.Unlock()
		return false
	}
	w.q = append(w.q, j)
	w.mu.Unlock()
	w.signal()
	return true
}

// reserve lets the caller write the next frame itself, saving the hand-over
// to the writer's goroutine, when the writer is idle with nothing queued;
// the caller must then call writeReserved.
func (w *writer) reserve() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop || w.busy || len(w.q) > 0 {
		return false
	}
	w.busy = true
	w.inline.Add(1) // halt waits for it, as for the writer's goroutine
	return true
}

// writeReserved writes j after reserve and reports it done (or the
// connection failed) before it lets halt return, so that a request whose
// bytes left is never failed by the teardown; then the writer goes on with
// what was queued meanwhile.
func (w *writer) writeReserved(j job) {
	defer w.inline.Done()
	var err error
	if len(j.data) <= inlineCopy {
		w.ibuf = append(append(w.ibuf[:0], j.hdr[:]...), j.data...)
		_, err = w.c.Write(w.ibuf)
	} else {
		w.ihdr = j.hdr // so that j stays on the stack
		bufs := net.Buffers{w.ihdr[:], j.data}
		_, err = bufs.WriteTo(w.c)
	}
	if afterInlineWrite != nil {
		afterInlineWrite()
	}
	if err != nil {
		w.fail(err)
	} else if j.req != nil {
		w.done(j.req)
	}
	w.mu.Lock()
	w.busy = false
	more := len(w.q) > 0 || w.stop
	w.mu.Unlock()
	if more {
		w.signal()
	}
}

// afterInlineWrite, when set (by tests), runs between an inline write and
// its completion: the window in which a teardown could fail a request
// whose bytes already left.
var afterInlineWrite func()

// maxBatch bounds the jobs one writev carries.
const maxBatch = 64

func (w *writer) run() {
	defer close(w.exited)
	var batch []job
	var bufs net.Buffers
	for {
		w.mu.Lock()
		for (len(w.q) == 0 || w.busy) && !w.stop {
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		if w.stop {
			w.mu.Unlock()
			return
		}
		w.busy = true
		n := min(len(w.q), maxBatch)
		batch = append(batch[:0], w.q[:n]...)
		rest := copy(w.q, w.q[n:])
		clear(w.q[rest:])
		w.q = w.q[:rest]
		w.mu.Unlock()

		bufs = bufs[:0]
		for i := range batch {
			bufs = append(bufs, batch[i].hdr[:])
			if len(batch[i].data) > 0 {
				bufs = append(bufs, batch[i].data)
			}
		}
		_, err := bufs.WriteTo(w.c)
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
		if err != nil {
			w.fail(err)
			return
		}
		for i := range batch {
			if batch[i].req != nil {
				w.done(batch[i].req)
			}
		}
		clear(batch)
	}
}

// halt drops the queued jobs, lets the write in progress finish within
// grace, and waits for the writer to exit.
func (w *writer) halt(grace time.Duration) {
	w.mu.Lock()
	w.stop = true
	w.q = nil
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	w.c.SetWriteDeadline(time.Now().Add(grace))
	<-w.exited
	w.inline.Wait()
}
