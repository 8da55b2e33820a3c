package launcher

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gorun/gorun/hostfile"
)

// failStarter starts no agent: it fails each host with its error.
type failStarter map[string]error

func (s failStarter) StartAgent(_ context.Context, host hostfile.Host) (AgentProcess, error) {
	return nil, s[host.Name]
}

// A host whose agent does not start is named once in gorun check's report,
// whether the starter's error names it (SSH's "h1: connection refused")
// or not; and h1's error is not h10's, whose name holds "h1".
func TestCheckStartErrorNamesHostOnce(t *testing.T) {
	hosts := []hostfile.Host{{Name: "h1", Slots: 1}, {Name: "h10", Slots: 1}}
	var out bytes.Buffer
	res, err := Check(t.Context(), CheckOptions{
		Hosts:   hosts,
		Starter: failStarter{"h1": errors.New("h1: connection refused"), "h10": errors.New("no route to host")},
		Out:     &out,
	})
	if err == nil {
		t.Fatal("Check succeeded with no agent up")
	}
	want := []string{"connection refused", "start the agent: no route to host"}
	for i, w := range want {
		if res[i].OK || res[i].Err != w {
			t.Errorf("%s: OK %v, Err %q; want %q", res[i].Host, res[i].OK, res[i].Err, w)
		}
	}
	FormatCheck(&out, res)
	report := out.String()
	for _, w := range []string{"\nh1: connection refused\n", "\nh10: start the agent: no route to host\n"} {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
	if strings.Contains(report, "h1: h1:") || strings.Contains(report, "h10: h10:") {
		t.Errorf("report names a host twice:\n%s", report)
	}
}
