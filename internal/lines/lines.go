// Package lines cuts a stream of writes into whole lines, for the
// collectors that read rank 0's report lines out of a job's output
// (collbench, netcheck).
package lines

import "bytes"

// Buffer holds what follows the last newline written so far. It does no
// locking: its owner serialises Feed and Flush.
type Buffer struct {
	partial []byte
}

// Feed appends p and calls line with each whole line it completes, the
// newline included.
func (b *Buffer) Feed(p []byte, line func(l []byte)) {
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		line(b.partial[:i+1])
		b.partial = b.partial[i+1:]
	}
	if len(b.partial) == 0 {
		b.partial = nil
	}
}

// Flush calls line with the bytes after the last newline, if any (a last
// line the writer did not end), and forgets them.
func (b *Buffer) Flush(line func(l []byte)) {
	if len(b.partial) > 0 {
		line(b.partial)
		b.partial = nil
	}
}
