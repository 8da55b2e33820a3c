package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/peerargs"
)

// An MPICH program under gorun mpiexec, with Hydra's flags: -ppn 2 over
// two hosts puts ranks 0-1 on the first and 2-3 on the second (gorun's
// --display-map, taken in the personality, shows it), and every rank sees
// 4 ranks, 2 of them on its node.
func TestPersonalityMPICH(t *testing.T) {
	t.Parallel()
	bin := buildMPI(t, t.TempDir(), "mpicc.mpich", "check.c")
	r := runGorun(t, 120*time.Second, nil, "mpiexec", "-n", "4", "-ppn", "2", "-hosts", "127.0.0.1,localhost", "--display-map", bin)
	checkPassed(t, r, 4, 2)
	for _, re := range []string{`(?m)^\s+0\s+127\.0\.0\.1\s+1\s+0-1$`, `(?m)^\s+1\s+localhost\s+1\s+2-3$`} {
		if !regexp.MustCompile(re).MatchString(r.stderr) {
			t.Errorf("the map on stderr does not match %s:\n%s", re, r.stderr)
		}
	}
}

// Programs that each name their hosts, as Intel MPI's MPMD form and Open
// MPI's app contexts do, run there: rank 0 on the first's, ranks 1-2 on
// the second's (gorun's --display-map shows it).
func TestPersonalityPerProgramHosts(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"mpiexec", "--display-map", "-n", "1", "-host", "127.0.0.1", "true", ":", "-n", "2", "-host", "localhost", "true"},
		{"mpirun", "--display-map", "-H", "127.0.0.1", "-np", "1", "true", ":", "-H", "localhost:2", "true"},
	} {
		r := runGorun(t, 60*time.Second, nil, args...)
		if r.code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, r.code, r.stderr)
		}
		for _, re := range []string{`(?m)^\s+0\s+127\.0\.0\.1\s+1\s+0$`, `(?m)^\s+1\s+localhost\s+2\s+1-2$`} {
			if !regexp.MustCompile(re).MatchString(r.stderr) {
				t.Errorf("%q: the map on stderr does not match %s:\n%s", args, re, r.stderr)
			}
		}
	}
}

// python3 -m torch.distributed.launch is torchrun's personality with
// launch.py's contract: each rank gets --local_rank=N after the script,
// unless --use-env. A launcher run as the program is named by the command
// that runs the job itself.
func TestPersonalityTorchLaunch(t *testing.T) {
	dir := t.TempDir()
	python := filepath.Join(dir, "python3") // a Python that has torch: it answers the check
	if err := os.WriteFile(python, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, tool, err := personality([]string{"gorun", python, "-m", "torch.distributed.launch", "--nproc_per_node", "2", "train.py", "--lr", "1"})
	if err != nil || tool != "torchrun" {
		t.Fatalf("personality: %q, %v", tool, err)
	}
	want := []string{"-np", "2", "sh", "-c", peerargs.DSWrapper, "sh", "3", python, "-u", "train.py", "--lr", "1"}
	if !slices.Equal(out[1:], want) {
		t.Errorf("personality: %q, want %q", out[1:], want)
	}
	out, _, _, err = personality([]string{"gorun", python, "-m", "torch.distributed.launch", "--use-env", "--nproc_per_node", "2", "train.py"})
	if err != nil || strings.Join(out[1:], " ") != "-np 2 "+python+" -u train.py" {
		t.Errorf("personality with --use-env: %q, %v", out, err)
	}
	note, err := launcherProgram([]string{"python3", "-m", "torch.distributed.run", "--nproc_per_node", "2", "x.py"}, 2)
	if err != nil || !strings.Contains(note, "gorun python3 -m torch.distributed.run --nproc_per_node 2 x.py runs the job itself") {
		t.Errorf("launcherProgram: %q, %v", note, err)
	}
}

// An Open MPI program under gorun mpirun, with Open MPI's flags.
func TestPersonalityOpenMPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plugin := []string{launcher.PMIxPluginEnv + "=" + pmixPlugin(t, dir)}
	bin := buildMPI(t, dir, "mpicc.openmpi", "check.c")
	r := runGorunIn(t, "", plugin, 120*time.Second, nil, "mpirun", "-np", "4", "--mca", "btl", "self,vader", "--allow-run-as-root", bin)
	checkPassed(t, r, 4, 4)
}

// A PyTorch DDP job (CPU, gloo) under gorun torchrun: the script runs
// under $GORUN_PYTHON with -u, as 2 ranks whose weights agree.
func TestPersonalityTorchrun(t *testing.T) {
	requireTorch(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "torch", "ddp_train.py"))
	if err != nil {
		t.Fatal(err)
	}
	r := runGorunIn(t, "", []string{"GORUN_PYTHON=" + torchPython}, 120*time.Second, nil,
		"torchrun", "--nproc-per-node", "2", "--standalone", "--max-restarts", "0", script)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	checkDDPOutput(t, r, 2)
}

// gorun called through a symlink named for a launcher reads its command
// line by that launcher's rules, prints its notes under that name, and
// takes gorun's own flags.
func TestPersonalitySymlinks(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	printRank := []string{"sh", "-c", `echo "rank=$RANK size=$WORLD_SIZE args=$*"`, "sh"}
	tests := []struct {
		name   string
		args   []string
		stdout string // its lines, sorted
		stderr string // in stderr
	}{
		{"mpirun", []string{"-np", "2", "-x", "A=1", "-tag-output", "sh", "-c", "echo $A"}, "[1,0]<stdout>:1\n[1,1]<stdout>:1\n", ""},
		{"orterun", append([]string{"-c", "2"}, printRank...), "rank=0 size=2 args=\nrank=1 size=2 args=\n", ""},
		{"prterun", append(append([]string{"-n", "1"}, printRank...), "-np", "5"), "rank=0 size=1 args=-np 5\n", ""},
		{"mpiexec", append([]string{"-n", "3", "-genvall"}, printRank...), "rank=0 size=3 args=\nrank=1 size=3 args=\nrank=2 size=3 args=\n",
			"gorun mpiexec: note: -genvall: ranks on this machine inherit"},
		{"mpiexec.hydra", []string{"-n", "2", "-l", "-genv", "A", "x y", "sh", "-c", "echo $A"}, "[0] x y\n[1] x y\n", ""},
		{"torchrun", append([]string{"--nproc_per_node=2", "--no-python", "--log-dir", dir, "--tee", "1"}, printRank...),
			"rank=0 size=2 args=\nrank=1 size=2 args=\n", "gorun: note: the ranks' logs go to " + dir + "/none_"},
		{"horovodrun", append([]string{"-np", "2"}, printRank...), "[1,0]<stdout>:rank=0 size=2 args=\n[1,1]<stdout>:rank=1 size=2 args=\n", ""}, // tagged, as its mpirun's
		{"deepspeed", []string{"--num_gpus", "1", "--no_python", "--no_local_rank", "sh", "-c", "echo $WORLD_SIZE"}, "1\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			link := filepath.Join(t.TempDir(), tt.name)
			if err := os.Symlink(exe, link); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, link, tt.args...)
			cmd.Env = append(os.Environ(), "GORUN_TEST_MAIN=1")
			r := runCmd(t, ctx, cmd, 60*time.Second)
			if r.code != 0 {
				t.Fatalf("%s %q: exit %d\nstdout:\n%s\nstderr:\n%s", tt.name, tt.args, r.code, r.stdout, r.stderr)
			}
			if got := sortedLines(r.stdout); got != tt.stdout {
				t.Errorf("%s %q: stdout\n%q, want\n%q", tt.name, tt.args, got, tt.stdout)
			}
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("%s %q: stderr lacks %q:\n%s", tt.name, tt.args, tt.stderr, r.stderr)
			}
		})
	}
}

// sortedLines returns s's lines in order, each ending in a newline.
func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if s == "" {
		return ""
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// gorun's own flags are taken in a personality where the launcher has no
// flag of the name: --summary-json writes its record.
func TestPersonalityGorunFlags(t *testing.T) {
	t.Parallel()
	summary := filepath.Join(t.TempDir(), "job.json")
	r := runGorun(t, 30*time.Second, nil, "mpirun", "--summary-json", summary, "-np", "2", "true")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(summary)
	if err != nil || !strings.Contains(string(b), `"rank"`) {
		t.Errorf("--summary-json: %v\n%s", err, b)
	}
}

// What a personality refuses: one line on stderr that names the launcher,
// nothing on stdout, exit status 2, and nothing started.
func TestPersonalityRefused(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	prog := []string{"sh", "-c", "touch " + marker}
	tests := []struct {
		args []string
		want string // the whole of stderr, without the newline
	}{
		{append([]string{"mpirun", "-np", "1", "-foo"}, prog...), "gorun mpirun: unknown flag -foo"},
		{append([]string{"mpirun", "-np", "1", "-genv", "A", "1"}, prog...), "gorun mpirun: unknown flag -genv"},
		{append(append([]string{"mpirun", "-np", "1"}, prog...), ":", "-np", "1", "-H", "a", "true"),
			"gorun mpirun: program 1 has no -H of its own where others have: give each program its hosts, or give the job's hosts once, before the first program"},
		{append([]string{"mpiexec", "-n", "1", "-configfile", "cfg"}, prog...), "gorun mpiexec: -configfile cfg and the program sh: give one"},
		{append([]string{"mpirun", "-np", "1", "--tag-outptu"}, prog...), "gorun mpirun: unknown flag --tag-outptu (did you mean --tag-output?)"},
		{append([]string{"mpirun", "-np", "2", "mpirun"}, prog...), "gorun mpirun: the program mpirun is a launcher itself, and every rank would start a job of its own: give its command line to gorun (gorun mpirun sh -c touch " + marker + ")"},
		{append([]string{"mpiexec", "-n", "1", "-prepend-pattern", "%r"}, prog...), "gorun mpiexec: -prepend-pattern %r: --tag-output prefixes each line with [rank] ([host:rank] over several hosts)"},
		{append([]string{"mpiexec", "-n", "1", "-launcher", "ll"}, prog...), "gorun mpiexec: -launcher ll: gorun starts ranks through ssh, fork (this machine), slurm, pbs, sge or lsf (and flux: gorun --launcher flux)"},
		{append([]string{"torchrun", "--nproc-per-node", "gpu", "--no-python"}, prog...),
			"gorun torchrun: --nproc-per-node gpu: give the number of ranks per node, or auto (one per GPU, else one per core)"},
		{append([]string{"torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--no-python"}, prog...),
			"gorun torchrun: --nnodes 2: give the node that serves the rendezvous: --rdzv-endpoint HOST:PORT (or --master-addr HOST)"},
		{append([]string{"torchrun", "--local-adr", "x", "--no-python"}, prog...), "gorun torchrun: unknown flag --local-adr (did you mean --local-addr?)"},
		{append([]string{"torchrun", "--rdzv", "x", "--no-python"}, prog...), "gorun torchrun: ambiguous option: --rdzv could match --rdzv-endpoint, --rdzv-id, --rdzv-backend, --rdzv-conf"},
		// A gorun flag's value that gorun refuses: gorun's own line.
		{append([]string{"mpirun", "-np", "1", "--bind-to", "hwthread"}, prog...),
			`gorun: usage: --bind-to "hwthread": gorun binds whole cores, never one hardware thread of a core: use --bind-to core`},
	}
	for _, tt := range tests {
		name, _, _ := strings.Cut(strings.Join(tt.args, " "), " sh -c")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 30*time.Second, nil, tt.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			if r.stdout != "" {
				t.Errorf("stdout is not empty:\n%s", r.stdout)
			}
			if want := tt.want + "\n"; r.stderr != want {
				t.Errorf("stderr\n%q, want\n%q", r.stderr, want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the program ran")
			}
		})
	}
}

// personality leaves gorun's own command lines alone, and a program named
// like a launcher after gorun's options is the program.
func TestPersonalityNotTaken(t *testing.T) {
	for _, args := range [][]string{
		{"gorun", "-np", "2", "mpirun", "-foo"},
		{"/usr/bin/gorun", "torchrun.sh"},
		{"mpirun.openmpi", "-foo"},
		{"gorun"},
	} {
		out, notes, tool, err := personality(args)
		if err != nil || tool != "" || notes != nil || strings.Join(out, " ") != strings.Join(args, " ") {
			t.Errorf("personality(%q) = %q, %q, %q, %v; want the arguments back", args, out, notes, tool, err)
		}
	}
	out, _, tool, err := personality([]string{"/opt/bin/mpiexec.hydra", "-n", "2", "prog"})
	if err != nil || tool != "mpiexec" || strings.Join(out, " ") != "/opt/bin/mpiexec.hydra --oversubscribe -np 2 prog" {
		t.Errorf("personality(mpiexec.hydra) = %q, %q, %v", out, tool, err)
	}
}
