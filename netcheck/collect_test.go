package netcheck

import (
	"bytes"
	"strings"
	"testing"
)

// The collector takes rank 0's lines, whole or split across writes, and
// passes every other line on; a bad line is an error at Close.
func TestCollector(t *testing.T) {
	in := InfoPrefix + `{"hosts":["h1","h2"],"transport":"tcp","rounds":1}` + "\n" +
		"hello from rank 1\n" +
		NodePrefix + `{"host":"h1","mtu":1500}` + "\n" +
		LinkPrefix + `{"from":"h1","to":"h2","gbps":9.5,"rtt_us":40}` + "\n" +
		LinkPrefix + `{"from":"h2","to":"h1","gbps":9.1,"rtt_us":40}` + "\n" +
		NodeTextPrefix + `"h1: no RDMA NICs\n"` + "\n" +
		"no newline at the end"
	for _, step := range []int{1, 7, len(in)} {
		var pass bytes.Buffer
		c := NewCollector(&pass)
		for i := 0; i < len(in); i += step {
			c.Write([]byte(in[i:min(i+step, len(in))]))
		}
		if err := c.Close(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got := pass.String(); got != "hello from rank 1\nno newline at the end" {
			t.Errorf("step %d: passed %q", step, got)
		}
		if info := c.Info(); info.Transport != "tcp" || len(info.Hosts) != 2 || info.Rounds != 1 {
			t.Errorf("step %d: info %+v", step, info)
		}
		ls := c.Links()
		if len(ls) != 2 || ls[0] != (Link{From: "h1", To: "h2", Gbps: 9.5, RTTus: 40}) || ls[1].Gbps != 9.1 {
			t.Errorf("step %d: links %+v", step, ls)
		}
		if got := c.NodeText(); got != "h1: no RDMA NICs\n" {
			t.Errorf("step %d: node text %q", step, got)
		}
		if ns := c.Nodes(); len(ns) != 1 || !strings.Contains(string(ns[0]), `"mtu":1500`) {
			t.Errorf("step %d: nodes %s", step, ns)
		}
	}
	c := NewCollector(&bytes.Buffer{})
	c.Write([]byte(LinkPrefix + "{not json\n"))
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "not json") {
		t.Errorf("a bad line: Close said %v", err)
	}
}
