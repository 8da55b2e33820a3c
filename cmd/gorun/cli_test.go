package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/topology"
	"github.com/gorun/gorun/topology/nvmllib"
)

func TestPrintEnv(t *testing.T) {
	t.Parallel()
	r := runGorunIn(t, "", []string{"GORUN_TEST_FROM_HEAD=yes"}, 30*time.Second, nil,
		"--print-env", "3", "-np", "4", "-x", "FOO=bar", "-x", "GORUN_TEST_FROM_HEAD", "./does-not-matter")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	for k, v := range map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4",
		"NODE_RANK": "0", "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "OMPI_COMM_WORLD_RANK": "3",
		"TORCHELASTIC_RESTART_COUNT": "0", "FOO": "bar", "GORUN_TEST_FROM_HEAD": "yes", "GORUN_RANK": "3"} {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	if p := env["MASTER_PORT"]; p == "" || p == "29500" {
		t.Errorf("MASTER_PORT=%q: want a port gorun chose", p)
	}
	if env["GORUN_JOB_ID"] == "" {
		t.Error("no GORUN_JOB_ID")
	}
	// The secret is there, but not its value: printed environments end
	// up in bug reports.
	if v, ok := env["GORUN_JOB_SECRET"]; !ok || v != "<redacted>" {
		t.Errorf("GORUN_JOB_SECRET=%q (present: %v), want <redacted>", v, ok)
	}
}

// The environment --print-env shows is the one the rank gets.
func TestPrintEnvMatchesRank(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 30*time.Second, nil, "-np", "2", "-x", "A=1", "sh", "-c", `if [ "$RANK" = 1 ]; then env | sort; fi`)
	p := runGorun(t, 30*time.Second, nil, "--print-env", "1", "-np", "2", "-x", "A=1", "sh")
	skip := func(l string) bool {
		// Values that differ per run (job id, secret, port, the agent's
		// socket directory, where the stacks hook lives) or per process.
		for _, pre := range []string{"GORUN_JOB_ID=", "TORCHELASTIC_RUN_ID=", "MASTER_PORT=", "GORUN_JOB_SECRET=", "GORUN_AGENT_SOCKET=",
			"GORUN_STACKS_DIR=", "PYTHONPATH=", "PWD=", "SHLVL=", "_="} {
			if strings.HasPrefix(l, pre) {
				return true
			}
		}
		return false
	}
	filter := func(s string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			if !skip(l) {
				out = append(out, l)
			}
		}
		return out
	}
	for _, name := range []string{"GORUN_JOB_SECRET=", "GORUN_AGENT_SOCKET=/", "GORUN_STACKS_DIR=/", "PYTHONPATH=/"} {
		if !strings.Contains(r.stdout, "\n"+name) || !strings.Contains(p.stdout, "\n"+name) {
			t.Errorf("%s is missing from the rank's environment or from --print-env", name)
		}
	}
	got, want := filter(r.stdout), filter(p.stdout)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rank 1's environment differs from --print-env 1:\nrank:\n%s\nprint-env:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	var hosts17 []string
	for i := range 17 {
		hosts17 = append(hosts17, fmt.Sprintf("h%d:1000000", i))
	}
	manySlots := strings.Join(hosts17, ",")
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("# two slots\nlocalhost slots=2\n"), 0o644)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("localhost slots=2\nlocalhost slots=x\n"), 0o644)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"np over slots", []string{"-np", "4", "--hostfile", hosts, "true"}, []string{"-np 4", "2 slots", "--oversubscribe"}},
		{"np over -H slots", []string{"-np", "3", "-H", "localhost:2", "true"}, []string{"-np 3", "2 slots"}},
		{"bad hostfile", []string{"--hostfile", bad, "true"}, []string{bad + ":2", "slots=x"}},
		{"missing hostfile", []string{"--hostfile", filepath.Join(dir, "nope"), "true"}, []string{"nope"}},
		{"bad map-by", []string{"--map-by", "diagonal", "true"}, []string{"--map-by", "diagonal"}},
		{"bad -x", []string{"-x", "1BAD=2", "true"}, []string{"1BAD"}},
		{"bad duration", []string{"--grace-period", "soon", "true"}, []string{"--grace-period", "soon"}},
		{"negative --merge-window", []string{"--merge-window", "-1s", "true"}, []string{"--merge-window -1s", "must not be negative"}},
		{"no program", []string{"-np", "2"}, []string{"no program"}},
		{"bad --pmix", []string{"--pmix", "maybe", "true"}, []string{"--pmix", "maybe", "auto, on or off"}},
		{"print-env out of range", []string{"--print-env", "7", "-np", "2", "true"}, []string{"--print-env 7", "0-1"}},
		// --dry-run used to win silently, --print-env ignored.
		{"dry-run with print-env", []string{"--dry-run", "--print-env", "0", "-np", "2", "true"}, []string{"--dry-run and --print-env 0 exclude each other"}},
		// It used to die of an out-of-memory crash, with a stack dump.
		{"np over the bound", []string{"-np", "2000000000", "true"}, []string{"-np 2000000000 is more than gorun runs (16777216 ranks at most)"}},
		{"slots over the bound", []string{"-H", manySlots, "true"}, []string{"one per slot of -H", "16777216"}},
		{"bad --kv-rank-budget", []string{"--kv-rank-budget", "100", "true"}, []string{"--kv-rank-budget", "want KEYS,BYTES"}},
		{"bad --kv-job-budget", []string{"--kv-job-budget", "100,5T", "true"}, []string{"--kv-job-budget", "the unit is none of K, M, G"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 30*time.Second, nil, tt.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			if strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("stderr has a stack dump:\n%s", r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

// A host that refuses connections is named, with the cause, quickly; the
// address is loopback on a port where nothing listens (tests never send
// traffic anywhere else).
func TestUnreachableHostNamed(t *testing.T) {
	t.Parallel()
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 slots=2 port=1\n"), 0o644)
	r := runGorun(t, 30*time.Second, nil, "--hostfile", hosts, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "127.0.0.1") || !strings.Contains(r.stderr, "refused") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r.elapsed > 10*time.Second {
		t.Fatalf("took %v to give up on a refused connection", r.elapsed)
	}
}

func TestOversubscribeAllowed(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 30*time.Second, nil, "-np", "3", "-H", "localhost:2", "--oversubscribe", "true")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// With no host source, gorun runs oversubscribed and says so once.
	n := 4 * 64
	r = runGorun(t, 60*time.Second, nil, "-np", itoa(n), "true")
	if r.code != 0 || strings.Count(r.stderr, "oversubscribed") != 1 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestDryRunAndDisplayMap(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 30*time.Second, nil, "--dry-run", "-H", "localhost:2,127.0.0.1:2", "--map-by", "node", "-np", "3", "sh", "-c", "echo ran")
	if r.code != 0 || strings.Contains(r.stdout, "ran") {
		t.Fatalf("dry run ran the program or failed: %d %q %s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"3 ranks on 2 hosts", "localhost", "0,2", "127.0.0.1", "map-by node"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("map lacks %q:\n%s", w, r.stderr)
		}
	}
	r = runGorun(t, 30*time.Second, nil, "--display-map", "-H", "localhost:2,127.0.0.1:2", "--map-by", "node", "-np", "3", "--tag-output", "sh", "-c", "echo rank=$RANK node=$NODE_RANK local=$LOCAL_RANK")
	for _, w := range []string{"[localhost:0] rank=0 node=0 local=0", "[127.0.0.1:1] rank=1 node=1 local=0", "[localhost:2] rank=2 node=0 local=1"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
}

// ppr:N:numa learns each host's NUMA count from its agent, then plans.
func TestMapByPPRNuma(t *testing.T) {
	t.Parallel()
	numa, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	n := max(len(numa), 1)
	r := runGorun(t, 30*time.Second, nil, "--map-by", "ppr:2:numa", "--display-map", "-H", "localhost:8,127.0.0.1:8", "sh", "-c", "echo $RANK")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 4*n || !strings.Contains(r.stderr, "map-by ppr:2:numa") {
		t.Fatalf("exit %d, %d NUMA nodes here\n%s%s", r.code, n, r.stdout, r.stderr)
	}
	r = runGorun(t, 30*time.Second, nil, "--map-by", "ppr:2:numa", "-np", "1", "-H", "localhost:8,127.0.0.1:8", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "without ranks") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}

func TestConfigFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "gorun.toml"), []byte("# job defaults\ngrace-period = \"7s\"\ntag-output = true\n"), 0o644)
	r := runGorunIn(t, dir, []string{"GORUN_NP=3"}, 30*time.Second, nil, "--grace-period", "9s", "config")
	for _, w := range []string{`grace-period = "9s"  # flag --grace-period`, "tag-output = true  # gorun.toml:3", "np = 3  # env GORUN_NP", "timeout = \"0s\"  # default"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("gorun config lacks %q:\n%s", w, r.stdout)
		}
	}
	r = runGorunIn(t, dir, []string{"GORUN_NP=2"}, 30*time.Second, nil, "sh", "-c", "echo x")
	if r.stdout != "[0] x\n[1] x\n" && r.stdout != "[1] x\n[0] x\n" {
		t.Errorf("config not applied to the job: %q", r.stdout)
	}
	os.WriteFile(filepath.Join(dir, "gorun.toml"), []byte("np = 2\ntag_output = true\n"), 0o644)
	r = runGorunIn(t, dir, nil, 30*time.Second, nil, "true")
	if r.code != 2 || !strings.Contains(r.stderr, "gorun.toml:2") || !strings.Contains(r.stderr, `did you mean "tag-output"`) {
		t.Errorf("unknown key: exit %d, stderr %s", r.code, r.stderr)
	}
}

// gorun topo prints a recorded DGX H100-class node as nvidia-smi topo -m
// does (with NVML's UUIDs, MIG modes and P2P status), and this machine's
// node (CPUs and NUMA nodes; no GPU here) as JSON, saying why NVML was not
// used; it records this machine, which then reads back the same.
func TestTopo(t *testing.T) {
	t.Parallel()
	const dgx = "../../topology/testdata/dgx-h100"
	r := runGorun(t, 30*time.Second, nil, "topo", "--machine", dgx)
	for _, w := range []string{"GPU0\t X \tNV18", "GPU3\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNODE\tNODE\tNODE\tPIX\tSYS", "NIC7: mlx5_7", "56-111,168-223\t1",
		"GPU7: NVIDIA GPU 7 at 0000:df:00.0 (0x10de:0x2330), GPU-6b1f0c07-5a1c-4d2e-9b7f-00003e9a0007, 80 GiB, MIG on", "NVIDIA GPUs from NVML.",
		"P2P read status (as nvidia-smi topo -p2p r)", "GPU7\tOK\tOK\tOK\tOK\tOK\tOK\tOK\t X "} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("topo of the DGX fixture lacks %q:\n%s", w, r.stdout)
		}
	}
	// The same machine without its NVML answers says so.
	r = runGorun(t, 30*time.Second, nil, "topo", "--root", dgx)
	if w := "NVIDIA GPUs from sysfs, not NVML (NVML library (libnvidia-ml.so.1) not found)"; !strings.Contains(r.stdout, w) {
		t.Errorf("topo of the DGX fixture without NVML lacks %q:\n%s", w, r.stdout)
	}
	r = runGorun(t, 30*time.Second, nil, "topo", "--json")
	var n struct {
		CPUs       []json.RawMessage `json:"cpus"`
		NUMANodes  []json.RawMessage `json:"numa_nodes"`
		NVMLStatus string            `json:"nvml_status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &n); err != nil || len(n.CPUs) != runtime.NumCPU() || len(n.NUMANodes) == 0 {
		t.Fatalf("topo --json: %v, %d CPUs (want %d), %d NUMA nodes\n%s", err, len(n.CPUs), runtime.NumCPU(), len(n.NUMANodes), r.stdout[:min(len(r.stdout), 500)])
	}
	// This gorun has NVML built in (cgo), as make build's: it looked for
	// libnvidia-ml, which this machine lacks.
	if !nvmllib.Available {
		t.Fatalf("the tests run a gorun without NVML (CGO_ENABLED=0?): the NVML path would go untested")
	}
	if n.NVMLStatus != topology.ErrNVMLNotFound.Error() && topology.LocalGPUs() == 0 {
		t.Errorf("topo --json: nvml_status %q, want %q", n.NVMLStatus, topology.ErrNVMLNotFound)
	}

	// This machine recorded, then read back: the same matrix.
	dir := filepath.Join(t.TempDir(), "here")
	r = runGorun(t, 30*time.Second, nil, "topo", "--record", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "recorded ") || !strings.Contains(r.stdout, "gorun topo --machine "+dir) {
		t.Fatalf("topo --record: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	live, rec := runGorun(t, 30*time.Second, nil, "topo"), runGorun(t, 30*time.Second, nil, "topo", "--machine", dir)
	if live.stdout == "" || rec.stdout != live.stdout {
		t.Errorf("topo of the recording differs from topo of this machine:\n%s\nlive:\n%s", rec.stdout, live.stdout)
	}
	r = runGorun(t, 30*time.Second, nil, "topo", "stray")
	if r.code != 2 || !strings.Contains(r.stderr, `unexpected argument "stray"`) {
		t.Errorf("topo stray: exit %d, %s", r.code, r.stderr)
	}
}

// gorun topo --plan N --env shows what N ranks would get on a recorded
// machine, through the same code as the agent: local rank i next to GPU
// i, every GPU visible, the same CUDA_DEVICE_ORDER on every rank and no
// NCCL variable; --gpu-bind single, -x (an allocation's list) and
// --bind-to change it as they would in a job.
func TestTopoPlan(t *testing.T) {
	t.Parallel()
	const dgx = "../../topology/testdata/dgx-h100"
	plan := func(args ...string) result {
		t.Helper()
		r := runGorun(t, 30*time.Second, nil, append([]string{"topo", "--machine", dgx, "--env"}, args...)...)
		if r.code != 0 {
			t.Fatalf("topo --plan %v: exit %d\n%s", args, r.code, r.stderr)
		}
		return r
	}
	r := plan("--plan", "8")
	for _, w := range []string{"dgx-h100: every rank sees the same 8 GPUs and local rank i uses device i", "no NCCL variable set",
		"dgx-h100 rank 0: GPU 0 GPU-", "CPUs 0-13,112-125 NUMA 0 NIC mlx5_0", "dgx-h100 rank 5: GPU 5", "CPUs 70-83,182-195 NUMA 1 NIC mlx5_5",
		"shares its PCIe switch (PIX)", "env: LOCAL_RANK=5 CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_5:1 OMP_NUM_THREADS=28"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("topo --plan 8 of the DGX fixture lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "NCCL_") || strings.Contains(r.stdout, "CUDA_VISIBLE_DEVICES") {
		t.Errorf("topo --plan 8 sets NCCL or visibility variables:\n%s", r.stdout)
	}
	r = plan("--plan", "2", "--gpu-bind", "single", "-x", "CUDA_VISIBLE_DEVICES=6,1")
	for _, w := range []string{"dgx-h100 rank 0: GPU 6 GPU-6b1f0c06", "env: LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=GPU-6b1f0c06-5a1c-4d2e-9b7f-00003e9a0006 CUDA_DEVICE_ORDER=PCI_BUS_ID",
		"dgx-h100 rank 1: GPU 1 GPU-6b1f0c01", "scripts must use device 0"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("topo --plan 2 --gpu-bind single -x CUDA_VISIBLE_DEVICES=6,1 lacks %q:\n%s", w, r.stdout)
		}
	}
	// MIG instances: not placed on GPUs, passed on whole, or one each.
	r = plan("--plan", "2", "-x", "CUDA_VISIBLE_DEVICES=MIG-aaaa,MIG-bbbb")
	if !strings.Contains(r.stdout, "dgx-h100 rank 1: not bound") || !strings.Contains(r.stdout, "names MIG instances, which gorun does not place") ||
		strings.Contains(r.stdout, "CUDA_VISIBLE_DEVICES=MIG-aaaa ") {
		t.Errorf("topo --plan 2 with MIG instances:\n%s", r.stdout)
	}
	r = plan("--plan", "2", "--gpu-bind", "single", "-x", "CUDA_VISIBLE_DEVICES=MIG-aaaa,MIG-bbbb")
	if !strings.Contains(r.stdout, "env: LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=MIG-bbbb") {
		t.Errorf("topo --plan 2 --gpu-bind single with MIG instances:\n%s", r.stdout)
	}
	r = plan("--plan", "2", "--bind-to", "numa")
	if !strings.Contains(r.stdout, "dgx-h100 rank 1: CPUs 56-111,168-223 NUMA 1 NIC mlx5_4") || strings.Contains(r.stdout, "CUDA_") {
		t.Errorf("topo --plan 2 --bind-to numa:\n%s", r.stdout)
	}
	for _, args := range [][]string{
		{"--plan", "9"}, {"--plan", "2", "--gpu-bind", "closest"}, {"--plan", "2", "--bind-to", "core", "--gpu-bind", "single"}, {"--plan", "2", "-x", "CUDA_VISIBLE_DEVICES"},
		{"--plan", "2", "-x", "CUDA_VISIBLE_DEVICES=9"}, {"--plan", "1", "--bind-to", "gpu", "-x", "CUDA_VISIBLE_DEVICES=MIG-aaaa"},
	} {
		r := runGorun(t, 30*time.Second, nil, append([]string{"topo", "--machine", dgx}, args...)...)
		if r.code != 2 || r.stderr == "" {
			t.Errorf("topo %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// gorun refuses, before any rank starts, more ranks than a host's agent
// can hold descriptors for, naming the host, the need and the limit; the
// largest job it allows runs. (Before, -np 100000 started ranks until the
// agent ran out of descriptors, and failed with exit status 1.)
func TestOpenFileLimit(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "it starts hundreds of ranks at once")
	// Lowered for gorun, its agent and ranks alone: a shell may always
	// lower its limits.
	run := func(args ...string) result {
		t.Helper()
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `ulimit -n 1024 && exec "$0" "$@"`, exe}, args...)...)
		cmd.Env = append(os.Environ(), "GORUN_TEST_MAIN=1")
		return runCmd(t, ctx, cmd, 60*time.Second)
	}
	mark := newMark(t)
	r := run("-np", "1000", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c", "echo started; sleep 30")
	if r.code != 2 || r.stdout != "" {
		t.Fatalf("-np 1000 under ulimit -n 1024: exit %d, stdout %q (want 2 and nothing started)\n%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"localhost: 1000 ranks need", "open files in gorun's agent there, more than its limit of 1024 (ulimit -n)", "ulimit -Hn"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	assertNoSurvivors(t, mark, time.Second)
	m := regexp.MustCompile(`at most (\d+) ranks fit`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("stderr does not say how many ranks fit:\n%s", r.stderr)
	}
	fit, _ := strconv.Atoi(m[1])
	if fit < 200 || fit >= 1000 {
		t.Fatalf("at most %d ranks fit under 1024 descriptors?", fit)
	}
	// As many as fit, all at once (each waits for the others to start).
	r = run("-np", m[1], "sh", "-c", `echo x >> "$0"; while [ $(wc -l < "$0") -lt $WORLD_SIZE ]; do sleep 0.1; done; echo ok`, filepath.Join(t.TempDir(), "started"))
	if r.code != 0 || strings.Count(r.stdout, "ok\n") != fit {
		t.Fatalf("-np %d under ulimit -n 1024: exit %d, %d ranks ok\n%s", fit, r.code, strings.Count(r.stdout, "ok\n"), r.stderr)
	}
}
