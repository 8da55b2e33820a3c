package jobrecord

import (
	"slices"
	"strings"
)

// EnvDiff is how a host's environment differs from the head's. A remote
// host's ranks get the environment that sshd (or srun) gives its agent,
// not the head's: a PATH, LD_LIBRARY_PATH or VIRTUAL_ENV that differs
// here is a likely cause of a rank that fails on one host only.
type EnvDiff struct {
	// Added are the host's variables that the head lacks, as NAME=VALUE.
	Added []string `json:"added,omitempty"`
	// Changed are the host's variables whose value differs from the
	// head's, as NAME=VALUE with the host's value.
	Changed []string `json:"changed,omitempty"`
	// Removed are the names of the head's variables that the host lacks.
	Removed []string `json:"removed,omitempty"`
}

// Empty reports whether the environments were the same.
func (d EnvDiff) Empty() bool { return len(d.Added)+len(d.Changed)+len(d.Removed) == 0 }

// Ignored names the variables that [Diff] leaves out: they differ from
// process to process, session to session or host to host by nature, and
// say nothing about a job. Every name that starts with one of
// IgnoredPrefixes is left out too.
var Ignored = []string{
	"_", "PWD", "OLDPWD", "SHLVL", "HOSTNAME", "HOST",
	"SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "SSH_AUTH_SOCK", "SSH_ORIGINAL_COMMAND",
	"TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "LS_COLORS",
	"DISPLAY", "WINDOWID", "TMUX", "TMUX_PANE", "STY", "WINDOW", "MAIL",
	"XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS",
	"MOTD_SHOWN", "LESSOPEN", "LESSCLOSE",
	// Slurm's variables of one task or one node of a step.
	"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_TASK_PID",
	"SLURM_GTIDS", "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT",
	// gorun's own variables of an agent.
	"GORUN_AGENT_KEY", "GORUN_HEAD_CERT",
}

// IgnoredPrefixes start the names of variables that [Diff] leaves out:
// bash's exported functions.
var IgnoredPrefixes = []string{"BASH_FUNC_"}

// ignored reports whether Diff leaves the variable name out.
func ignored(name string) bool {
	if slices.Contains(Ignored, name) {
		return true
	}
	for _, p := range IgnoredPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Diff returns how the environment host differs from head, both
// "NAME=VALUE" lists (as os.Environ returns them, and best after
// [Redact]: two redacted values compare equal). The variables of
// [Ignored] are left out; the lists come sorted by name. Where a name
// appears twice, the last one counts, as for exec.
func Diff(head, host []string) EnvDiff {
	h, o := envMap(head), envMap(host)
	var d EnvDiff
	for name, v := range o {
		hv, ok := h[name]
		switch {
		case ignored(name):
		case !ok:
			d.Added = append(d.Added, name+"="+v)
		case hv != v:
			d.Changed = append(d.Changed, name+"="+v)
		}
	}
	for name := range h {
		if _, ok := o[name]; !ok && !ignored(name) {
			d.Removed = append(d.Removed, name)
		}
	}
	slices.SortFunc(d.Added, byName)
	slices.SortFunc(d.Changed, byName)
	slices.Sort(d.Removed)
	return d
}

// byName orders NAME=VALUE strings by name.
func byName(a, b string) int {
	an, _, _ := strings.Cut(a, "=")
	bn, _, _ := strings.Cut(b, "=")
	return strings.Compare(an, bn)
}

// envMap maps the names of env to their values; entries without "=" are
// left out.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if name, v, ok := strings.Cut(kv, "="); ok {
			m[name] = v
		}
	}
	return m
}
