package launcher

import (
	"bytes"
	"errors"
	"os"
	"time"
)

// lineWait is how long a relay that cut a line at the end of a full read
// waits for the line's rest before it sends the part it has: well under
// the head's output.DefaultFlushDelay, after which the head would write
// the part out as a line of its own.
const lineWait = 20 * time.Millisecond

// chunkReader reads a rank's pipe into chunks for the head. A read that
// fills its buffer has most likely cut a line the rank wrote whole: the
// chunk then ends at its last newline, and the rest starts the next
// chunk, which a read of at most lineWait completes. So a line is cut
// only when the rank itself writes it in parts, or one is longer than the
// buffer, and a loaded host that runs the relay late cannot make the head
// tag the two halves of a line as two lines.
type chunkReader struct {
	f    *os.File
	buf  []byte
	held int  // bytes at buf's start carried over from the last read
	wait bool // held is a cut line: the next read waits at most lineWait
}

func newChunkReader(f *os.File) *chunkReader {
	// Small until a read fills it: most ranks say little, and 64 KiB
	// for each of a host's pipes cost page faults at every launch.
	return &chunkReader{f: f, buf: make([]byte, relayFirst)}
}

// next returns the next chunk, valid until the following call, or the
// read's error (io.EOF at the pipe's end) once nothing is left.
func (c *chunkReader) next() ([]byte, error) {
	if c.held > 0 {
		copy(c.buf, c.buf[len(c.buf)-c.held:])
	}
	if c.wait {
		c.f.SetReadDeadline(time.Now().Add(lineWait))
	}
	n, err := c.f.Read(c.buf[c.held:])
	if c.wait {
		c.f.SetReadDeadline(time.Time{})
		c.wait = false
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil // the rest of the line is late: send what there is
	}
	n += c.held
	c.held = 0
	if n == 0 {
		return nil, err
	}
	chunk := c.buf[:n]
	if n == len(c.buf) && err == nil {
		if cut := bytes.LastIndexByte(chunk, '\n') + 1; cut > 0 && cut < n {
			c.held, c.wait = n-cut, true
			chunk = chunk[:cut]
		}
		if len(c.buf) < relayMax {
			// Grown once the rank has said a buffer's worth; what is
			// held moves to the new buffer's end, as next expects.
			big := make([]byte, relayMax)
			copy(big[relayMax-c.held:], c.buf[n-c.held:n])
			copy(big, chunk)
			chunk = big[:len(chunk)]
			c.buf = big
		}
	}
	return chunk, err
}
