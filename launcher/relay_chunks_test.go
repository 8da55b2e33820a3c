package launcher

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// readAll reads c's chunks to the pipe's end.
func readAll(t *testing.T, c *chunkReader) [][]byte {
	t.Helper()
	var chunks [][]byte
	for {
		chunk, err := c.next()
		if len(chunk) > 0 {
			chunks = append(chunks, bytes.Clone(chunk))
		}
		if err == io.EOF {
			return chunks
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Lines written whole arrive whole, however the reads fall: a chunk ends
// at a newline unless a line is longer than the buffer or the rank wrote
// no more yet; nothing is lost, added or reordered (the flood of
// TestMergeOutputFlood cut "rank 6 line 172" at byte 4096 when the relay
// ran late).
func TestChunkReaderKeepsLines(t *testing.T) {
	var data strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&data, "step %d\nrank 6 line %d\n", i, i)
	}
	long := strings.Repeat("x", 70<<10) + "\n" // longer than any buffer
	data.WriteString(long + "tail without newline")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { // a line a write, as a rank's echo or line-buffered stdout writes
		for _, l := range strings.SplitAfter(data.String(), "\n") {
			io.WriteString(w, l)
		}
		w.Close()
	}()
	chunks := readAll(t, newChunkReader(r))
	r.Close()
	if got := string(bytes.Join(chunks, nil)); got != data.String() {
		t.Fatalf("read %d bytes, want the %d written, unchanged", len(got), data.Len())
	}
	longStart := data.Len() - len(long) - len("tail without newline")
	at := 0
	for i, c := range chunks[:len(chunks)-1] {
		at += len(c)
		if c[len(c)-1] != '\n' && at < longStart {
			t.Errorf("chunk %d of %d (%d bytes) ends inside a short line: %q", i, len(chunks), len(c), c[max(0, len(c)-20):])
		}
	}
}

// A partial line is not held back when nothing follows it in the read (a
// prompt), and one cut at a full buffer goes out after lineWait when its
// rest does not come.
func TestChunkReaderPartialLines(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	c := newChunkReader(r)
	io.WriteString(w, "prompt> ")
	if chunk, err := c.next(); err != nil || string(chunk) != "prompt> " {
		t.Fatalf("prompt: %q, %v", chunk, err)
	}

	full := strings.Repeat("0123456789abcde\n", relayFirst/16-1) + "0123456789abcdef" // relayFirst bytes, the last line cut
	io.WriteString(w, full)
	chunk, err := c.next()
	if err != nil || string(chunk) != full[:len(full)-16] {
		t.Fatalf("full buffer: %d bytes ending %q, %v; want %d ending at the last newline", len(chunk), chunk[max(0, len(chunk)-16):], err, len(full)-16)
	}
	start := time.Now()
	chunk, err = c.next()
	if err != nil || string(chunk) != "0123456789abcdef" {
		t.Fatalf("the cut line: %q, %v", chunk, err)
	}
	if d := time.Since(start); d < lineWait/2 || d > 2*time.Second {
		t.Errorf("the cut line came after %v, want about %v", d, lineWait)
	}

	io.WriteString(w, "its rest\n")
	if chunk, err := c.next(); err != nil || string(chunk) != "its rest\n" {
		t.Fatalf("after: %q, %v", chunk, err)
	}
}
