// This file holds the agent's relays between a rank and the head: the
// rank's stdout and stderr to the head (keeping the tail of stderr for the
// summary, and printing them here too when the head asks), and the head's
// stdin chunks to the rank.

package launcher

import (
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
)

// Stdin flow control: the head sends chunks of at most stdinChunk bytes and
// keeps at most stdinWindow chunks unacknowledged, so the agent's queue for
// a rank that does not read its stdin never blocks the control channel.
const (
	stdinChunk  = 32 << 10
	stdinWindow = 32
)

// A relay's read buffer: relayFirst bytes, relayMax once a read fills it.
const (
	relayFirst = 4 << 10
	relayMax   = 64 << 10
)

// relay sends what a rank writes to one of its pipes to the head, in
// chunks that keep whole lines whole (chunkReader).
func (a *agent) relay(p *rankProc, f *os.File, s output.Stream) {
	defer p.readers.Done()
	c := newChunkReader(f)
	for {
		chunk, err := c.next()
		if len(chunk) > 0 {
			if s == output.Stderr {
				p.tail.write(chunk)
			}
			if p.files.write(s, chunk) { // its file (rankfiles.go), and gorun's output unless only the file
				now := time.Now()
				a.w.SendOutput(control.Output{Rank: p.rank, Stream: uint8(s), Time: now, Data: chunk})
				if a.print != nil {
					a.print.Write(p.rank, s, now, chunk) // this host's terminal failing stops nothing
				}
			}
		}
		if err != nil {
			p.files.closeStream(s)
			return
		}
	}
}

// startPrint makes the multiplexer that prints this host's ranks' output
// when l asks for it (Launch.Print), as the head would print it, and the
// agent has somewhere to print. The loop calls it before any rank of l
// starts: the relays read a.print.
func (a *agent) startPrint(l control.Launch) {
	if l.Print == nil || a.o.Stdout == nil || a.print != nil {
		return
	}
	pr := l.Print
	o := outputFormat(env.Launcher(l.Personality), pr.Tag, pr.Timestamp, pr.Merge, pr.MergeWindow, l.NodeCount)
	o.Stdout, o.Stderr, o.SameTerminal = a.o.Stdout, a.o.Stderr, sameFile(a.o.Stdout, a.o.Stderr)
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	o.Host = func(int) string { return l.Host }
	o.Ranks, o.Only = l.WorldSize, make([]int, 0, len(l.Ranks))
	for _, s := range l.Ranks {
		o.Only = append(o.Only, s.Rank)
	}
	m, err := output.New(o)
	if err != nil {
		a.log.printf("printing the ranks' output: %v", err)
		return
	}
	a.print = m
}

// printEnded writes what the print multiplexer holds of rank, which
// ended: before its end is reported, so that the head's word on it comes
// after its last lines.
func (a *agent) printEnded(rank int) {
	if a.print != nil {
		a.print.CloseRank(rank)
	}
}

// closePrint writes what the print multiplexer still holds, as the agent
// ends.
func (a *agent) closePrint() {
	if a.print != nil {
		a.print.Close()
	}
}

// feed writes stdin chunks to a rank and acknowledges them, so the head
// keeps only a window in flight.
func (a *agent) feed(rank int, w *os.File, ch chan []byte) {
	broken := false
	for b := range ch {
		if !broken {
			if _, err := w.Write(b); err != nil {
				broken = true // the rank closed its stdin: drop the rest
			}
		}
		a.w.Send(control.TypeStdinAck, control.StdinAck{Rank: rank, Bytes: len(b)})
	}
	w.Close()
}

// onStdin queues a chunk of the head's stdin for a rank (s.Data is the
// event's own); an empty one closes the rank's stdin.
//
// The loop sends on the channel, as retire closes it, so no chunk goes
// to a closed channel; the send never blocks, since the head keeps at
// most stdinWindow chunks in flight and the channel holds one more.
func (a *agent) onStdin(s control.Stdin) {
	ch := a.stdin[s.Rank]
	switch {
	case ch == nil:
		// The rank is gone or takes no stdin: acknowledge and drop.
		a.send(control.TypeStdinAck, control.StdinAck{Rank: s.Rank, Bytes: len(s.Data)})
	case len(s.Data) == 0:
		delete(a.stdin, s.Rank)
		close(ch)
	default:
		ch <- s.Data
	}
}

// tail keeps the last lines a rank wrote to stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 2048

func (t *tail) write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailBytes {
		t.buf = append(t.buf[:0], p[len(p)-tailBytes:]...)
		return
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
}

// String returns at most the last 10 lines.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimRight(string(t.buf), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
