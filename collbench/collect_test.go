package collbench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The collector picks rank 0's lines out of the job's output, whatever
// the write boundaries, passes the rest through, and starts the table with
// the job's description.
func TestCollector(t *testing.T) {
	info, _ := json.Marshal(Header{Collective: "allreduce", Op: "sum", DType: "float32", Ranks: 4, Hosts: 2, Transport: "shm+tcp"})
	r := Result{Collective: "allreduce", Op: "sum", DType: "float32", Ranks: 4, Bytes: 1024, Count: 256, Time: 10 * time.Microsecond, Algorithm: "ring"}
	r.Fill()
	res, _ := json.Marshal(r)
	out := "hello from rank 2\n" + InfoPrefix + string(info) + "\n" + ResultPrefix + string(res) + "\nlast words without newline"
	var table, pass bytes.Buffer
	c := NewCollector(&table, &pass, Header{Command: "gorun bench allreduce"})
	for i := 0; i < len(out); i += 7 { // lines cut anywhere
		c.Write([]byte(out[i:min(i+7, len(out))]))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if pass.String() != "hello from rank 2\nlast words without newline" {
		t.Errorf("passed through: %q", pass.String())
	}
	if got := c.Results(); len(got) != 1 || got[0] != r {
		t.Errorf("results %+v, want %+v", got, r)
	}
	h := c.Header()
	if h.Transport != "shm+tcp" || h.Hosts != 2 || h.Command != "gorun bench allreduce" {
		t.Errorf("header %+v", h)
	}
	for _, w := range []string{"# Transport            : shm+tcp", "# Command              : gorun bench allreduce", "ring", "# Avg bus bandwidth    : 0.15"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	// A result line that does not parse is an error at Close.
	c = NewCollector(nil, &pass, Header{})
	c.Write([]byte(ResultPrefix + "{broken\n"))
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "unreadable result lines") {
		t.Errorf("Close = %v", err)
	}
}
