package launcher

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/jobrecord"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/rendezvous"
)

// TestProbeInfo asks an agent about its host, as the head does for
// --record: the answer names the host as the plan does, carries the
// agent's gorun version, kernel and environment, and no secret of it.
func TestProbeInfo(t *testing.T) {
	t.Setenv("GORUN_TEST_API_TOKEN", "s3cret-of-the-test")
	var out bytes.Buffer
	a := &agent{o: AgentOptions{Version: "9.9.9", Host: "node7"}, w: control.NewWriter(&out)}
	a.answerProbe(control.Probe{ID: 42, Kind: control.ProbeInfo}, probeView{})

	f, err := control.NewReader(&out).Next()
	if err != nil || f.Type != control.TypeProbeRe {
		t.Fatalf("the agent answered %v, %v; want a probe-reply frame", f.Type, err)
	}
	if bytes.Contains(f.Payload, []byte("s3cret-of-the-test")) {
		t.Errorf("the answer carries a secret of the agent's environment:\n%s", f.Payload)
	}
	var rep control.ProbeReply
	if err := f.Decode(&rep); err != nil || rep.ID != 42 || rep.Err != "" {
		t.Fatalf("reply %+v, %v; want id 42 and no error", rep, err)
	}
	var info jobrecord.HostInfo
	if err := json.Unmarshal(rep.Data, &info); err != nil {
		t.Fatalf("the reply's data is not a jobrecord.HostInfo: %v\n%s", err, rep.Data)
	}
	host, _ := os.Hostname()
	if info.Host != "node7" || info.Hostname != host || info.GorunVersion != "9.9.9" || info.Kernel == "" {
		t.Errorf("info = host %q hostname %q version %q kernel %q; want node7, %s, 9.9.9 and a kernel",
			info.Host, info.Hostname, info.GorunVersion, info.Kernel, host)
	}
	if !slices.Contains(info.Env, "GORUN_TEST_API_TOKEN="+jobrecord.Redacted) || !slices.ContainsFunc(info.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		t.Errorf("info.Env lacks PATH or the redacted token: %q", info.Env)
	}
}

// TestRecordRedactsGorunSecrets keeps jobrecord.Redact, which cannot
// import the packages that name gorun's secret variables, in step with
// them.
func TestRecordRedactsGorunSecrets(t *testing.T) {
	t.Parallel()
	for _, name := range append([]string{rendezvous.EnvSecret, AgentKeyEnv}, plugins.SecretEnv...) {
		if got := jobrecord.Redact([]string{name + "=value"}); got[0] != name+"="+jobrecord.Redacted {
			t.Errorf("jobrecord.Redact(%s=value) = %q: a job record would keep it", name, got[0])
		}
	}
}
