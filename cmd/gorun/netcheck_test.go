package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/netcheck"
	"github.com/gorun/gorun/testhosts"
)

// netReport is what gorun check --net --json prints.
type netReport struct {
	Links    []netcheck.Link  `json:"links"`
	Slow     []netcheck.Slow  `json:"slow"`
	Hosts    []map[string]any `json:"hosts"`
	Skew     []map[string]any `json:"skew"`
	Verdict  string           `json:"verdict"`
	ElapsedS float64          `json:"elapsed_s"`
}

func checkNet(t *testing.T, c *testhosts.Cluster) (netReport, result) {
	t.Helper()
	r := onCluster(t, c, 2*time.Minute, "check", "--net", "--json")
	var rep netReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("exit %d: standard output is not one JSON object: %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	return rep, r
}

// shape slows host's link both ways with the kernel's token bucket (tbf):
// eth0 inside its namespace (what it sends) and its veth on the bridge
// (what it receives), until the test ends.
func shape(t *testing.T, c *testhosts.Cluster, host, rate string) {
	t.Helper()
	h, err := c.Host(host)
	if err != nil {
		t.Fatal(err)
	}
	tbf := []string{"root", "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"}
	ctx := context.Background()
	inside := func(verb string, args ...string) *exec.Cmd {
		return c.Exec(ctx, host, append([]string{"tc", "qdisc", verb, "dev", "eth0"}, args...)...)
	}
	if out, err := inside("add", tbf...).CombinedOutput(); err != nil {
		t.Fatalf("tc on %s's eth0: %v: %s", host, err, out)
	}
	t.Cleanup(func() { inside("del", "root").Run() })
	if out, err := exec.Command("tc", append([]string{"qdisc", "add", "dev", h.Veth}, tbf...)...).CombinedOutput(); err != nil {
		t.Fatalf("tc on %s's veth %s: %v: %s", host, h.Veth, err, out)
	}
	t.Cleanup(func() { exec.Command("tc", "qdisc", "del", "dev", h.Veth, "root").Run() })
}

// On 4 SSH hosts, gorun check --net measures the 12 links and flags none;
// with h4's link slowed to 200 Mbit/s both ways, the verdict names h4 and
// gorun exits 1.
func TestSSHCheckNet(t *testing.T) {
	c := sharedCluster(t)
	if _, err := exec.LookPath("tc"); err != nil {
		testhosts.Need(t) // the fixture's tools are there; tc (iproute2) must be too
		t.Fatalf("tc (iproute2): %v", err)
	}
	for i := range 3 {
		rep, r := checkNet(t, c)
		if r.code != 0 || len(rep.Slow) != 0 || !strings.HasPrefix(rep.Verdict, "no slow link") {
			t.Errorf("unshaped, run %d: exit %d, %d slow links, verdict %q\n%s", i+1, r.code, len(rep.Slow), rep.Verdict, r.stderr)
		}
		if len(rep.Links) != 12 || len(rep.Hosts) != 4 {
			t.Errorf("unshaped, run %d: %d links, %d host reports: want 12 and 4", i+1, len(rep.Links), len(rep.Hosts))
		}
		for _, k := range rep.Links {
			if k.Gbps <= 0 || k.RTTus <= 0 {
				t.Errorf("link %+v: want a rate and a round trip", k)
			}
		}
		t.Logf("unshaped, run %d: %.2f s to the verdict (%.2f s in all): %s", i+1, rep.ElapsedS, r.elapsed.Seconds(), rep.Verdict)
	}

	shape(t, c, "h4", "200mbit")
	rep, r := checkNet(t, c)
	t.Logf("h4 shaped: %.2f s to the verdict: %s", rep.ElapsedS, rep.Verdict)
	if r.code != 1 || !strings.Contains(rep.Verdict, "h4's link") || !strings.Contains(rep.Verdict, "in both directions from h4") {
		t.Errorf("h4 shaped: exit %d, verdict %q: want 1 and h4 named\n%s", r.code, rep.Verdict, r.stderr)
	}
	if len(rep.Slow) != 6 {
		t.Errorf("h4 shaped: %d slow links, want h4's 6: %+v", len(rep.Slow), rep.Slow)
	}
	for _, s := range rep.Slow {
		if s.From != "h4" && s.To != "h4" {
			t.Errorf("slow link %s->%s: h4 is not in it", s.From, s.To)
		}
		if s.Gbps > 0.3 {
			t.Errorf("slow link %s->%s at %.2f Gbit/s: over the 200 Mbit/s it is shaped to", s.From, s.To, s.Gbps)
		}
	}
	// The text: the matrix with h4's cells starred, and the verdict.
	r = onCluster(t, c, 2*time.Minute, "check", "--net")
	if r.code != 1 || !strings.Contains(r.stdout, "Gbit/s") || !strings.Contains(r.stdout, "Verdict: h4's link") {
		t.Errorf("text: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// check --net's usage errors exit 2 before any host is reached.
func TestCheckNetUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"check", "--net", "--expect", "100GB"},
		{"check", "--net", "--slow-fraction", "0"},
		{"check", "--net", "--slow-fraction", "1.5"},
		{"check", "--net", "hostname"},
		{"check", "--net", "--transport", "plugin"},
		{"check", "--net", "--transport", "carrier-pigeon"},
	} {
		r := runGorun(t, 30*time.Second, nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "check --net") {
			t.Errorf("%q: exit %d, want 2 and a message naming check --net\n%s", args, r.code, r.stderr)
		}
	}
}

// The check entry of COMMANDS in man/gorun.1 shows every flag of its own
// (the job's are in OPTIONS).
func TestManPageDocumentsCheckNetFlags(t *testing.T) {
	t.Parallel()
	cmds := manSection(t, readManPage(t, "gorun.1"), "COMMANDS")
	commandShowsFlags(t, cmds, "check", checkFlags())
	_, entry, _ := strings.Cut(cmds, ".BR check")
	entry, _, _ = strings.Cut(entry, "\n.TP\n.BR show")
	if !strings.Contains(entry, "1 when a link is slow") {
		t.Errorf("the check entry of COMMANDS does not say that gorun check --net exits 1 when a link is slow:\n%s", entry)
	}
}
