package collbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/gorun/gorun/internal/lines"
)

// Collector is the writer a benchmark job's standard output goes to, on
// the host that runs gorun: it picks rank 0's result lines (ResultPrefix)
// out of the output, writes each as a row of a live Table, and passes every
// other line through. It is safe for concurrent use.
type Collector struct {
	mu      sync.Mutex
	tw      io.Writer
	header  Header
	table   *Table
	pass    io.Writer
	buf     lines.Buffer
	results []Result
	bad     []string
}

// NewCollector returns a Collector that writes the table with header h to
// table (nil: no table) and other lines to pass. The table starts with
// the first result, its header completed by what rank 0 reports of the
// job (InfoPrefix).
func NewCollector(table io.Writer, pass io.Writer, h Header) *Collector {
	return &Collector{pass: pass, tw: table, header: h}
}

// Header returns the header, completed by rank 0's report when it came.
func (c *Collector) Header() Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header
}

// Write implements io.Writer.
func (c *Collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Feed(p, c.line)
	return len(p), nil
}

func (c *Collector) line(l []byte) {
	if rest, ok := bytes.CutPrefix(l, []byte(InfoPrefix)); ok {
		var h Header
		if err := json.Unmarshal(bytes.TrimSpace(rest), &h); err != nil {
			c.bad = append(c.bad, fmt.Sprintf("%q: %v", bytes.TrimSpace(l), err))
			return
		}
		h.Command = c.header.Command
		c.header = h
		return
	}
	rest, ok := bytes.CutPrefix(l, []byte(ResultPrefix))
	if !ok {
		c.pass.Write(l)
		return
	}
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(rest), &r); err != nil {
		c.bad = append(c.bad, fmt.Sprintf("%q: %v", bytes.TrimSpace(l), err))
		return
	}
	c.results = append(c.results, r)
	if c.tw != nil {
		if c.table == nil {
			c.table = NewTable(c.tw, c.header)
		}
		c.table.Row(r)
	}
}

// Close passes on a last line without a newline and ends the table. It
// returns an error naming the result lines that could not be read.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Flush(c.line)
	var err error
	if c.table != nil {
		err = c.table.Close()
	}
	if len(c.bad) > 0 {
		return fmt.Errorf("collbench: %d unreadable result lines, the first %s", len(c.bad), c.bad[0])
	}
	return err
}

// Results returns the results collected so far.
func (c *Collector) Results() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Result(nil), c.results...)
}
