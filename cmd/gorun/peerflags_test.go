package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher"
)

// appsLines returns examples/mpi/apps.c's lines of r's stdout, sorted.
func appsLines(r result) []string {
	var out []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "rank ") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// Several programs in one job (MPMD), as mpirun and Hydra run them: the
// ranks numbered in order across the programs, one MPI_COMM_WORLD (the
// allreduce sums every rank), each rank its program's MPI_APPNUM and
// argv[0]; from plain gorun, gorun mpiexec (MPICH, PMI-1) and gorun
// mpirun (Open MPI, PMIx), and from Hydra's -configfile.
func TestMPMD(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := buildMPI(t, dir, "mpicc.mpich", "apps.c")
	b := filepath.Join(dir, "b-mpich")
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"rank 0 of 3 appnum 0 argv0 " + a + " sum 3",
		"rank 1 of 3 appnum 1 argv0 " + b + " sum 3",
		"rank 2 of 3 appnum 1 argv0 " + b + " sum 3",
	}
	cfg := filepath.Join(dir, "cfg")
	if err := os.WriteFile(cfg, []byte("# Hydra's MPMD file\n-n 1 "+a+"\n-n 2 "+b+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-np", "1", a, ":", "-np", "2", b},
		{"mpiexec", "-n", "1", a, ":", "-n", "2", b},
		{"mpiexec.hydra", "-configfile", cfg},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 120*time.Second, nil, args...)
			if r.code != 0 {
				t.Fatalf("gorun %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
			}
			if got := appsLines(r); !slices.Equal(got, want) {
				t.Errorf("gorun %q:\n%s\nwant\n%s", args, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// gorun mpirun's MPMD runs Open MPI programs: each rank gets its program's
// MPI_APPNUM through PMIx.
func TestMPMDOpenMPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plugin := []string{launcher.PMIxPluginEnv + "=" + pmixPlugin(t, dir)}
	a := buildMPI(t, dir, "mpicc.openmpi", "apps.c")
	b := filepath.Join(dir, "b-openmpi")
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	r := runGorunIn(t, "", plugin, 120*time.Second, nil, "mpirun", "-np", "2", "--mca", "btl", "self,vader", a, ":", "-np", "1", b)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	want := []string{
		"rank 0 of 3 appnum 0 argv0 " + a + " sum 3",
		"rank 1 of 3 appnum 0 argv0 " + a + " sum 3",
		"rank 2 of 3 appnum 1 argv0 " + b + " sum 3",
	}
	if got := appsLines(r); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Each program of a job keeps its own -x and --wdir; a program without
// its rank count is refused before anything starts.
func TestMPMDOptions(t *testing.T) {
	t.Parallel()
	wd := t.TempDir()
	show := []string{"sh", "-c", `echo "$RANK $A $(pwd)"`}
	args := append(append(append([]string{"-np", "1", "-x", "A=job"}, show...), ":", "-np", "1", "-x", "A=two", "--wdir", wd), show...)
	r := runGorun(t, 60*time.Second, nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	cwd, _ := os.Getwd()
	if got, want := sortedLines(r.stdout), "0 job "+cwd+"\n1 two "+wd+"\n"; got != want {
		t.Errorf("stdout\n%q, want\n%q", got, want)
	}
	r = runGorun(t, 30*time.Second, nil, "-np", "1", "true", ":", "true")
	if want := "gorun: usage: true (program 2 of the job): give its number of ranks (': -np N true'); a job of several programs runs each on the ranks it is given\n"; r.code != 2 || r.stderr != want {
		t.Errorf("exit %d, stderr\n%q, want\n%q", r.code, r.stderr, want)
	}
}

// The peers' flags that gorun answers with its own behaviour, run.
func TestPeerFlagsWork(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cpus := []string{"sh", "-c", `echo "$RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"`}
	rankfile := filepath.Join(dir, "rankfile")
	cores := coreCPUs(t)
	first, last := cores[0], cores[len(cores)-1]
	if err := os.WriteFile(rankfile, []byte(fmt.Sprintf("rank 1=localhost slot=0\nrank 0=localhost slot=0:%d\n", len(cores)-1)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$RANK $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Ranks 0 and 1 exit 0 at once, rank 2 with 3 a little later: no
	// rank is stopped before it ends.
	lastFails := `[ "$RANK" = 2 ] && { sleep 0.5; exit 3; }; exit 0`
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // sorted lines; "" = not checked
		stderr string // a regular expression that stderr matches
	}{
		{"pernode", []string{"mpirun", "-pernode", "-H", "localhost:4", "sh", "-c", "echo $RANK"}, 0, "0\n", ""},
		{"nooversubscribe", []string{"mpirun", "--oversubscribe", "-nooversubscribe", "-np", "3", "-H", "localhost:2", "true"}, 2, "",
			`-np 3 is more than the 2 slots`},
		{"npersocket", []string{"mpirun", "--npersocket", "1", "--display-map", "sh", "-c", "echo $RANK"}, 0, "",
			`map-by ppr:1:package`},
		{"cpus-per-proc", []string{"mpirun", "-np", "1", "--cpus-per-proc", "1", "--bind-to", "core", cpus[0], cpus[1], cpus[2]}, 0,
			"0 " + first + "\n", ""},
		{"map-by PE", []string{"mpirun", "-np", "1", "--map-by", "slot:PE=1", "--bind-to", "core", cpus[0], cpus[1], cpus[2]}, 0,
			"0 " + first + "\n", ""},
		{"rankfile", []string{"mpirun", "-rf", rankfile, "--oversubscribe", cpus[0], cpus[1], cpus[2]}, 0,
			"0 " + last + "\n1 " + first + "\n", ""},
		{"display-allocation", []string{"mpirun", "--display-allocation", "-H", "localhost:3", "-np", "1", "true"}, 0, "",
			`(?m)^gorun: allocation: 1 host, 3 slots \(-H localhost:3\)\n\s+host\s+slots\s+max_slots\n\s+localhost\s+3\s+-$`},
		{"get-stack-traces", []string{"mpirun", "--get-stack-traces", "--timeout", "60", "-np", "1", "true"}, 0, "", `^$`},
		{"print-all-exitcodes", []string{"mpiexec", "-print-all-exitcodes", "-n", "3", "sh", "-c", lastFails}, 3, "",
			`(?m)^\[mpiexec@[^]]+\] Exit codes: \[localhost\] 0,0,768$`},
		{"print-exit-codes", []string{"--print-exit-codes", "-np", "3", "sh", "-c", lastFails}, 3, "",
			`(?m)^gorun: exit codes: \[localhost\] 0,0,3$`},
		{"use_env", []string{"torchrun", "--use_env", "--nproc_per_node", "2", "--no-python", "sh", "-c", "echo $LOCAL_RANK"}, 0, "0\n1\n", ""},
		{"python -m torch.distributed.run", []string{"python3", "-m", "torch.distributed.run", "--nproc_per", "2", "--no_python", "sh", "-c", "echo $RANK"}, 0,
			"0\n1\n", ""},
		{"horovodrun", []string{"horovodrun", "-np", "2", "--fusion-threshold-mb", "1", "sh", "-c", "echo $HOROVOD_RANK $HOROVOD_FUSION_THRESHOLD"}, 0,
			"[1,0]<stdout>:0 1048576\n[1,1]<stdout>:1 1048576\n", ""},
		{"deepspeed", []string{"deepspeed", "--num_gpus", "2", "--no_python", script, "x"}, 0,
			"0 --local_rank=0 x\n1 --local_rank=1 x\n", ""},
		{"rankfile host typo", []string{"--rankfile", filepath.Join(dir, "typo"), "-H", "localhost,127.0.0.1", "true"}, 2, "",
			`host localhots is not among the hosts \(did you mean localhost\?\)`},
	}
	if err := os.WriteFile(filepath.Join(dir, "typo"), []byte("rank 0=localhots slot=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 60*time.Second, nil, tt.args...)
			if r.code != tt.code {
				t.Fatalf("gorun %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tt.args, r.code, tt.code, r.stdout, r.stderr)
			}
			if tt.stdout != "" && sortedLines(r.stdout) != tt.stdout {
				t.Errorf("gorun %q: stdout\n%q, want\n%q", tt.args, sortedLines(r.stdout), tt.stdout)
			}
			if tt.stderr != "" && !regexp.MustCompile(tt.stderr).MatchString(r.stderr) {
				t.Errorf("gorun %q: stderr does not match %s:\n%s", tt.args, tt.stderr, r.stderr)
			}
		})
	}
}

// coreCPUs returns the CPU lists of package 0's cores (all the hardware
// threads of each), in the order of their core ids, as /proc/self/status
// writes them.
func coreCPUs(t *testing.T) []string {
	t.Helper()
	paths, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/topology")
	byCore := map[int]string{}
	for _, p := range paths {
		pkg, err1 := os.ReadFile(filepath.Join(p, "physical_package_id"))
		core, err2 := os.ReadFile(filepath.Join(p, "core_id"))
		sib, err3 := os.ReadFile(filepath.Join(p, "thread_siblings_list"))
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		var id int
		if strings.TrimSpace(string(pkg)) == "0" && func() bool { _, err := fmt.Sscan(string(core), &id); return err == nil }() {
			byCore[id] = strings.TrimSpace(string(sib))
		}
	}
	if len(byCore) == 0 {
		t.Skip("no CPU topology in sysfs")
	}
	ids := make([]int, 0, len(byCore))
	for id := range byCore {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = byCore[id]
	}
	return out
}

// torchrun's --log-dir, --redirects and --tee: each local rank's streams
// in LOG_DIR/RUN_XXXXXXXX/attempt_0/LOCAL_RANK/{stdout,stderr}.log, as
// torchrun writes them; redirected streams go there only, tee'd ones to
// gorun's output too. Hydra's -outfile-pattern and -errfile-pattern
// write each rank's to the file its pattern names, instead.
func TestRankFiles(t *testing.T) {
	t.Parallel()
	prog := []string{"sh", "-c", `echo out$RANK; echo err$RANK >&2`}
	logs := t.TempDir()
	r := runGorun(t, 60*time.Second, nil, append([]string{"torchrun", "--nproc_per_node", "2", "--rdzv_id", "job7", "--log_dir", logs,
		"--redirects", "3", "--tee", "1", "--no_python"}, prog...)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	runs, _ := filepath.Glob(filepath.Join(logs, "job7_*"))
	if len(runs) != 1 {
		t.Fatalf("%s holds %q, want one job7_XXXXXXXX", logs, runs)
	}
	for lr := range 2 {
		for stream, want := range map[string]string{"stdout": fmt.Sprintf("out%d\n", lr), "stderr": fmt.Sprintf("err%d\n", lr)} {
			b, err := os.ReadFile(filepath.Join(runs[0], "attempt_0", fmt.Sprint(lr), stream+".log"))
			if err != nil || string(b) != want {
				t.Errorf("local rank %d's %s.log: %q, %v; want %q", lr, stream, b, err, want)
			}
		}
	}
	if got := sortedLines(r.stdout); got != "out0\nout1\n" {
		t.Errorf("stdout (tee'd): %q", got)
	}
	if strings.Contains(r.stderr, "err0") || strings.Contains(r.stderr, "err1") {
		t.Errorf("the redirected stderr reached gorun's:\n%s", r.stderr)
	}

	// A relative pattern is taken from the ranks' working directory.
	dir := t.TempDir()
	r = runGorun(t, 60*time.Second, nil, append([]string{"mpiexec", "-n", "2", "-wdir", dir, "-outfile-pattern", "out.%r.%h", "-errfile-pattern", "err.%r"}, prog...)...)
	if r.code != 0 || strings.Contains(r.stdout, "out") || strings.Contains(r.stderr, "err0") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for name, want := range map[string]string{"out.0.localhost": "out0\n", "out.1.localhost": "out1\n", "err.0": "err0\n", "err.1": "err1\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
}

// gorun torchrun runs its programs under the Python of the torchrun in
// PATH; one without torch is named, with the way to choose another.
func TestTorchrunPython(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	python := filepath.Join(bin, "python3.99")
	// A Python without torch: its find_spec check exits 3.
	if err := os.WriteFile(python, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	torchrun := filepath.Join(bin, "torchrun")
	if err := os.WriteFile(torchrun, []byte("#!"+python+"\nimport sys\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "GORUN_PYTHON="}
	r := runGorunIn(t, "", env, 30*time.Second, nil, "torchrun", "--nproc-per-node", "1", "train.py")
	want := "gorun torchrun: " + python + " (the interpreter of " + torchrun + ") has no torch module: set GORUN_PYTHON to the Python that has torch (GORUN_PYTHON=/path/to/python gorun torchrun ...)\n"
	if r.code != 2 || r.stderr != want {
		t.Errorf("exit %d, stderr\n%q, want\n%q", r.code, r.stderr, want)
	}
	// A Python with torch: the ranks run the script under it, with -u.
	if err := os.WriteFile(python, []byte("#!/bin/sh\ncase $1 in -c) exit 0;; esac\necho \"python3.99 $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = runGorunIn(t, "", env, 30*time.Second, nil, "torchrun", "--nproc-per-node", "1", "train.py", "--lr", "1")
	if r.code != 0 || r.stdout != "python3.99 -u train.py --lr 1\n" {
		t.Errorf("exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
}
