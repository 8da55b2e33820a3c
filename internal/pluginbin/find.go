package pluginbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotFound is returned by Find when no plugin binary is found.
var ErrNotFound = errors.New("plugin not found")

// Find looks for the plugin binary named name: in the directories of dirs
// first (in order), then in PATH. It returns the path and the places it
// looked, for an error message. The first binary found must pass
// CheckBinary: otherwise Find returns its path with the *UnsafeError.
func Find(name string, dirs ...string) (string, []string, error) {
	var looked []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		looked = append(looked, p)
		if IsExec(p) {
			return p, looked, CheckBinary(p)
		}
	}
	looked = append(looked, "$PATH")
	if p, err := exec.LookPath(name); err == nil {
		return p, looked, CheckBinary(p)
	}
	return "", looked, fmt.Errorf("%w: %s (looked in %s)", ErrNotFound, name, strings.Join(looked, ", "))
}

// IsExec reports whether p is a regular file that someone may execute.
func IsExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// SecretEnv names the variables that a plugin is never started with,
// although the process that starts it may have them: GORUN_JOB_SECRET,
// the job's rendezvous secret (in every rank's environment, which is
// where transport and collective plugins start); GORUN_AGENT_KEY, the key
// an agent started by srun proves itself to the head with (the agent
// removes it from its own environment; this is in case it did not); and
// SSH_AUTH_SOCK, the user's ssh-agent, forwarded to the agents of a launch
// tree. A plugin runs as the same user and could read its parent's
// environment from /proc, so this is not a wall: it keeps the secrets out
// of what plugins pass on, log or dump.
var SecretEnv = []string{"GORUN_JOB_SECRET", "GORUN_AGENT_KEY", "SSH_AUTH_SOCK"}

// Environ returns environ without the variables of SecretEnv: the
// environment a plugin starts from.
func Environ(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(SecretEnv, name) {
			out = append(out, kv)
		}
	}
	return out
}
