package launcher

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/hostfile"
)

// --display-allocation prints the hosts and their slots.
func TestFormatAllocation(t *testing.T) {
	var b bytes.Buffer
	FormatAllocation(&b, []hostfile.Host{{Name: "a", Slots: 2}, {Name: "b", User: "u", Slots: 4, MaxSlots: 8}}, "--hostfile hf")
	want := "gorun: allocation: 2 hosts, 6 slots (--hostfile hf)\n  host  slots  max_slots\n  a     2      -\n  u@b   4      8\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// --print-exit-codes: every rank's status, host by host; under gorun
// mpiexec, Hydra's line and numbers.
func TestPrintExitCodes(t *testing.T) {
	plan, err := NewPlan([]hostfile.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}, PlanOptions{NP: 3})
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	rec := []RankRecord{{End: end}, {End: end, Code: 2}, {End: end, Code: -1, SignalNum: 9}}
	for _, tt := range []struct {
		l    env.Launcher
		want string
	}{
		{env.Gorun, "gorun: exit codes: [a] 0,2 [b] 137\n"},
		{env.MPIExec, "] Exit codes: [a] 0,512 [b] 9\n"},
	} {
		var b bytes.Buffer
		h := &head{o: Options{PrintExitCodes: true, Personality: tt.l, Stderr: &b}, plan: plan, rec: rec}
		h.printExitCodes()
		if !strings.HasSuffix(b.String(), tt.want) {
			t.Errorf("%q: %q, want it to end with %q", tt.l, b.String(), tt.want)
		}
	}
	var b bytes.Buffer
	(&head{o: Options{Stderr: &b}, plan: plan, rec: rec}).printExitCodes()
	if b.Len() != 0 {
		t.Errorf("printed without --print-exit-codes: %q", b.String())
	}
}
