package netcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/gorun/gorun/internal/lines"
)

// Collector is the writer a `gorun check --net` job's standard output
// goes to, on the host that runs gorun: it picks rank 0's lines
// (InfoPrefix, LinkPrefix, NodePrefix, NodeTextPrefix) out of the output and passes every
// other line through. It is safe for concurrent use.
type Collector struct {
	mu    sync.Mutex
	pass  io.Writer
	buf   lines.Buffer
	info  Info
	links []Link
	nodes []json.RawMessage
	text  string
	bad   []string
}

// NewCollector returns a Collector that passes the lines that are not
// rank 0's reports to pass.
func NewCollector(pass io.Writer) *Collector {
	return &Collector{pass: pass}
}

// Write implements io.Writer.
func (c *Collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Feed(p, c.line)
	return len(p), nil
}

func (c *Collector) line(l []byte) {
	decode := func(rest []byte, v any) bool {
		if err := json.Unmarshal(bytes.TrimSpace(rest), v); err != nil {
			c.bad = append(c.bad, fmt.Sprintf("%q: %v", bytes.TrimSpace(l), err))
			return false
		}
		return true
	}
	if rest, ok := bytes.CutPrefix(l, []byte(InfoPrefix)); ok {
		var in Info
		if decode(rest, &in) {
			c.info = in
		}
		return
	}
	if rest, ok := bytes.CutPrefix(l, []byte(LinkPrefix)); ok {
		var k Link
		if decode(rest, &k) {
			c.links = append(c.links, k)
		}
		return
	}
	if rest, ok := bytes.CutPrefix(l, []byte(NodePrefix)); ok {
		var raw json.RawMessage
		if decode(rest, &raw) {
			c.nodes = append(c.nodes, raw)
		}
		return
	}
	if rest, ok := bytes.CutPrefix(l, []byte(NodeTextPrefix)); ok {
		var text string
		if decode(rest, &text) {
			c.text += text
		}
		return
	}
	c.pass.Write(l)
}

// Close passes on a last line without a newline. It returns an error
// naming the report lines that could not be read.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Flush(c.line)
	if len(c.bad) > 0 {
		return fmt.Errorf("netcheck: %d unreadable report lines, the first %s", len(c.bad), c.bad[0])
	}
	return nil
}

// Info returns rank 0's description of the job; its zero value if none
// came.
func (c *Collector) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Links returns the links collected so far, in the order they came.
func (c *Collector) Links() []Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Link(nil), c.links...)
}

// Nodes returns the hosts' own reports collected so far, as JSON.
func (c *Collector) Nodes() []json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]json.RawMessage(nil), c.nodes...)
}

// NodeText returns the hosts' own reports as text.
func (c *Collector) NodeText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.text
}
