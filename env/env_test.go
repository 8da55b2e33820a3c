package env

import (
	"errors"
	"strings"
	"testing"
)

func lookupIn(env []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				return v, true
			}
		}
		return "", false
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()
	r := Rank{JobID: "j1", Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, NodeRank: 1, NodeCount: 2,
		Host: "n2", MasterAddr: "10.0.0.1", MasterPort: 23456, RestartCount: 2, MaxRestarts: 3, AgentSocket: "/run/a.sock", Dir: "/work"}
	base := []string{"PATH=/bin", "RANK=99", "HOME=/root", "MASTER_PORT=1", "PWD=/root"}
	got := Build(base, r, []string{"MASTER_PORT=29500", "FOO=bar"})
	want := map[string]string{
		"PATH": "/bin", "HOME": "/root", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
		"GROUP_RANK": "1", "NODE_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
		"MASTER_PORT": "29500", // an explicit -x wins over gorun's choice
		"FOO":         "bar", "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3",
		"TORCHELASTIC_RUN_ID": "j1", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
		"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "1",
		"GORUN_JOB_ID": "j1", "GORUN_RANK": "5", "GORUN_AGENT_SOCKET": "/run/a.sock", "GORUN_HOSTNAME": "n2",
	}
	seen := map[string]int{}
	for _, kv := range got {
		k, _, _ := strings.Cut(kv, "=")
		seen[k]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s appears %d times", k, n)
		}
	}
	look := lookupIn(got)
	for k, v := range want {
		if g, ok := look(k); !ok || g != v {
			t.Errorf("%s = %q (set %v), want %q", k, g, ok, v)
		}
	}
	if got[0] != "PATH=/bin" || got[1] != "RANK=5" {
		t.Errorf("base order not kept: %v", got[:2])
	}
}

func TestNoAgentSocket(t *testing.T) {
	t.Parallel()
	for _, kv := range Vars(Rank{}) {
		if strings.HasPrefix(kv, "GORUN_AGENT_SOCKET=") {
			t.Fatalf("GORUN_AGENT_SOCKET set without a socket: %q", kv)
		}
	}
}

func TestParseExport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Export
		wantErr bool
	}{
		{in: "FOO", want: Export{Name: "FOO"}},
		{in: "FOO=", want: Export{Name: "FOO", HasValue: true}},
		{in: "FOO=a=b", want: Export{Name: "FOO", Value: "a=b", HasValue: true}},
		{in: "_x1=2", want: Export{Name: "_x1", Value: "2", HasValue: true}},
		{in: "", wantErr: true},
		{in: "=v", wantErr: true},
		{in: "1A=v", wantErr: true},
		{in: "A B=v", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseExport(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrBadExport) {
					t.Fatalf("ParseExport(%q) error = %v, want ErrBadExport", tt.in, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseExport(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	ex := []Export{{Name: "A"}, {Name: "B", Value: "2", HasValue: true}, {Name: "MISSING"}}
	vars, missing := Resolve(ex, lookupIn([]string{"A=1"}))
	if strings.Join(vars, " ") != "A=1 B=2" || strings.Join(missing, " ") != "MISSING" {
		t.Fatalf("Resolve = %v, %v", vars, missing)
	}
}

// A PMIx server's variables reach the rank with the switch that makes
// Open MPI 4.1 accept a launcher it does not know; -x still wins.
func TestPMIxEnv(t *testing.T) {
	t.Parallel()
	r := Rank{JobID: "j", Rank: 1, WorldSize: 2, PMIx: []string{"PMIX_RANK=1", "PMIX_NAMESPACE=gorun.j.0"}, Secret: "s3cret-s3cret-s3cret"}
	got := map[string]string{}
	for _, kv := range Build(nil, r, []string{"OMPI_MCA_schizo=ompi"}) {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	if got["PMIX_RANK"] != "1" || got["PMIX_NAMESPACE"] != "gorun.j.0" || got["GORUN_JOB_SECRET"] != "s3cret-s3cret-s3cret" {
		t.Errorf("PMIx or secret variables missing: %v", got)
	}
	if got["OMPI_MCA_schizo"] != "ompi" {
		t.Errorf("OMPI_MCA_schizo=%q, want the -x value", got["OMPI_MCA_schizo"])
	}
	for _, kv := range Vars(Rank{}) {
		if strings.HasPrefix(kv, "OMPI_MCA_schizo=") || strings.HasPrefix(kv, "GORUN_JOB_SECRET=") {
			t.Errorf("%s set without PMIx or a secret", kv)
		}
	}
	for _, kv := range Vars(Rank{PMIx: []string{"PMIX_RANK=0"}}) {
		if kv == "OMPI_MCA_schizo=ompi" {
			return
		}
	}
	t.Error("OMPI_MCA_schizo=ompi missing with PMIx")
}

// Inside Slurm a rank's Slurm task variables are its own, not the batch
// step's it inherited; outside Slurm none is set.
func TestSlurmVars(t *testing.T) {
	t.Parallel()
	base := []string{"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_JOB_ID=42"}
	got := map[string]string{}
	for _, kv := range Build(base, Rank{Rank: 5, LocalRank: 1, NodeRank: 2, WorldSize: 6, Slurm: true}, nil) {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "SLURM_NTASKS": "6", "SLURM_NPROCS": "6", "SLURM_JOB_ID": "42"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	for _, kv := range Vars(Rank{Rank: 1}) {
		if strings.HasPrefix(kv, "SLURM_") {
			t.Errorf("%s set outside Slurm", kv)
		}
	}
}

func TestWithIface(t *testing.T) {
	x := []Export{{Name: "A", Value: "1", HasValue: true}}
	if got := WithIface(x, ""); len(got) != 1 {
		t.Errorf("no --iface: %v", got)
	}
	if got := WithIface(x, "eth1"); len(got) != 2 || got[1] != (Export{Name: CollIface, Value: "eth1", HasValue: true}) || len(x) != 1 {
		t.Errorf("--iface eth1: %v (input %v)", got, x)
	}
	mine := append(x, Export{Name: CollIface, Value: "=ib0", HasValue: true})
	if got := WithIface(mine, "eth1"); len(got) != 2 || got[1].Value != "=ib0" {
		t.Errorf("-x %s wins: %v", CollIface, got)
	}
}

// The Python stacks hook: its variables with a stacks directory, and its
// directory first on PYTHONPATH, whatever set PYTHONPATH before, unless
// GORUN_STACKS_PYTHON=0 is in the final environment.
func TestStacksHook(t *testing.T) {
	t.Parallel()
	r := Rank{StacksDir: "/run/gorun/j1/stacks", StacksSignal: 45}
	const hook = "/run/gorun/j1/stacks/py"
	tests := []struct {
		name    string
		r       Rank
		base    []string
		exports []string
		want    string // PYTHONPATH; "-" = unset
	}{
		{"no stacks directory", Rank{}, []string{"PYTHONPATH=/a"}, nil, "/a"},
		{"no PYTHONPATH", r, nil, nil, hook},
		{"the agent's PYTHONPATH", r, []string{"PYTHONPATH=/a:/b"}, nil, hook + ":/a:/b"},
		{"an empty one", r, []string{"PYTHONPATH="}, nil, hook},
		{"-x PYTHONPATH", r, []string{"PYTHONPATH=/a"}, []string{"PYTHONPATH=/x"}, hook + ":/x"},
		{"already first (a restart's environment)", r, []string{"PYTHONPATH=" + hook + ":/a"}, nil, hook + ":/a"},
		{"off by -x", r, []string{"PYTHONPATH=/a"}, []string{"GORUN_STACKS_PYTHON=0"}, "/a"},
		{"off in the agent's environment", r, []string{"GORUN_STACKS_PYTHON=0"}, nil, "-"},
		{"on again by -x", r, []string{"GORUN_STACKS_PYTHON=0"}, []string{"GORUN_STACKS_PYTHON=1"}, hook},
		{"a trailing slash", Rank{StacksDir: "/s/"}, nil, nil, "/s/py"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Build(tt.base, tt.r, tt.exports)
			seen := map[string]int{}
			for _, kv := range got {
				k, _, _ := strings.Cut(kv, "=")
				seen[k]++
			}
			if seen["PYTHONPATH"] > 1 {
				t.Errorf("PYTHONPATH set %d times: %v", seen["PYTHONPATH"], got)
			}
			v, ok := lookupIn(got)("PYTHONPATH")
			if !ok {
				v = "-"
			}
			if v != tt.want {
				t.Errorf("PYTHONPATH = %q, want %q", v, tt.want)
			}
			dir, _ := lookupIn(got)(StacksDirVar)
			sig, hasSig := lookupIn(got)(StacksSignalVar)
			if dir != tt.r.StacksDir || hasSig != (tt.r.StacksSignal > 0) || hasSig && sig != "45" {
				t.Errorf("%s=%q, %s=%q (set %v)", StacksDirVar, dir, StacksSignalVar, sig, hasSig)
			}
		})
	}
}

func TestUserMasterPort(t *testing.T) {
	for _, tt := range []struct {
		exports []string
		want    bool
	}{
		{nil, false},
		{[]string{"MASTER_ADDR=127.0.0.1", "MASTER_PORTS=1"}, false},
		{[]string{"A=1", "MASTER_PORT=29500"}, true},
		{[]string{"MASTER_PORT="}, true},
	} {
		if got := UserMasterPort(tt.exports); got != tt.want {
			t.Errorf("UserMasterPort(%q) = %v, want %v", tt.exports, got, tt.want)
		}
	}
}
