package pluginbin

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
)

// SecretEnv covers the secret that package env puts in a rank's
// environment, and Environ removes exactly those variables.
func TestEnviron(t *testing.T) {
	const secret = "0123456789abcdef01234567"
	for _, kv := range Environ(env.Vars(env.Rank{JobID: "j", Secret: secret, AgentSocket: "/run/sock"})) {
		if strings.Contains(kv, secret) {
			t.Errorf("a rank's %s is passed on", kv)
		}
	}
	got := Environ([]string{"A=1", "GORUN_JOB_SECRET=s", "GORUN_AGENT_KEY=k", "SSH_AUTH_SOCK=/x", "GORUN_JOB_SECRETX=2", "B"})
	if strings.Join(got, " ") != "A=1 GORUN_JOB_SECRETX=2 B" {
		t.Errorf("Environ = %q", got)
	}
}
