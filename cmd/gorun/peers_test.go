package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A peer launcher's spelling does what its gorun equivalent does: each
// pair runs as gorun would and gives the same output (lines that name
// the spelling's own values aside, the whole of it).
func TestPeerSpellingsAccepted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("localhost slots=4\n127.0.0.1 slots=4\n"), 0o644)
	envOf := func(names ...string) string {
		return "for v in " + strings.Join(names, " ") + `; do eval "echo $v=\${$v-unset}"; done`
	}
	tests := []struct {
		name        string
		peer, gorun []string
		want        string // in the peer form's stdout, or stderr with --dry-run
	}{
		{"-wdir", []string{"-np", "2", "-wdir", dir, "pwd"}, []string{"-np", "2", "--wdir", dir, "pwd"}, dir + "\n" + dir + "\n"},
		{"-wd", []string{"-np", "1", "-wd", dir, "pwd"}, []string{"-np", "1", "--wdir", dir, "pwd"}, dir + "\n"},
		{"-cwd", []string{"-np", "1", "-cwd", dir, "pwd"}, []string{"-np", "1", "--wdir", dir, "pwd"}, dir + "\n"},
		{"--mca", []string{"--mca", "btl", "self,vader", "-np", "1", "sh", "-c", envOf("OMPI_MCA_btl")},
			[]string{"-x", "OMPI_MCA_btl=self,vader", "-np", "1", "sh", "-c", envOf("OMPI_MCA_btl")}, "OMPI_MCA_btl=self,vader\n"},
		{"-mca twice", []string{"-mca", "btl", "tcp", "-mca", "pml", "ob1", "-np", "1", "sh", "-c", envOf("OMPI_MCA_btl", "OMPI_MCA_pml")},
			[]string{"-x", "OMPI_MCA_btl=tcp", "-x", "OMPI_MCA_pml=ob1", "-np", "1", "sh", "-c", envOf("OMPI_MCA_btl", "OMPI_MCA_pml")}, "OMPI_MCA_btl=tcp\nOMPI_MCA_pml=ob1\n"},
		{"-genv", []string{"-genv", "A", "1 2", "-np", "1", "sh", "-c", envOf("A")}, []string{"-x", "A=1 2", "-np", "1", "sh", "-c", envOf("A")}, "A=1 2\n"},
		{"-env", []string{"-env", "A", "-", "-np", "1", "sh", "-c", envOf("A")}, []string{"-x", "A=-", "-np", "1", "sh", "-c", envOf("A")}, "A=-\n"},
		{"-genvlist", []string{"-genvlist", "HOME,PATH", "-np", "1", "sh", "-c", envOf("HOME")}, []string{"-x", "HOME", "-x", "PATH", "-np", "1", "sh", "-c", envOf("HOME")}, "HOME="},
		{"-f -ppn", []string{"--dry-run", "-f", hosts, "-ppn", "2"}, []string{"--dry-run", "--hostfile", hosts, "-N", "2"}, "4 ranks on 2 hosts"},
		{"-hosts", []string{"--dry-run", "-hosts", "localhost,127.0.0.1"}, []string{"--dry-run", "-H", "localhost,127.0.0.1"}, "2 ranks on 2 hosts"},
		{"-l", []string{"-l", "-np", "1", "echo", "hi"}, []string{"--tag-output", "-np", "1", "echo", "hi"}, "[0] hi\n"},
		{"-prepend-rank", []string{"-prepend-rank", "-np", "1", "echo", "hi"}, []string{"--tag-output", "-np", "1", "echo", "hi"}, "[0] hi\n"},
		{"--map-by core", []string{"--dry-run", "--map-by", "core", "-H", "localhost:2"}, []string{"--dry-run", "--map-by", "slot", "-H", "localhost:2"}, "2 ranks on 1 host"},
		{"-map-by socket", []string{"--dry-run", "-map-by", "socket", "-H", "localhost:2"}, []string{"--dry-run", "--map-by", "package", "-H", "localhost:2"}, "2 ranks on 1 host"},
		{"-report-bindings", []string{"-report-bindings", "-np", "1", "true"}, []string{"--report-bindings", "-np", "1", "true"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := runGorun(t, 30*time.Second, nil, tt.peer...)
			g := runGorun(t, 30*time.Second, nil, tt.gorun...)
			if p.code != 0 || g.code != 0 {
				t.Fatalf("exit %d (gorun's way: %d)\nstderr: %s\ngorun's way's stderr: %s", p.code, g.code, p.stderr, g.stderr)
			}
			if p.stdout != g.stdout || p.stderr != g.stderr {
				t.Errorf("gorun %q and gorun %q differ:\nstdout %q vs %q\nstderr %q vs %q", tt.peer, tt.gorun, p.stdout, g.stdout, p.stderr, g.stderr)
			}
			out := p.stdout
			if tt.peer[0] == "--dry-run" {
				out = p.stderr
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("gorun %q: output lacks %q:\n%s", tt.peer, tt.want, out)
			}
		})
	}
}

// -genvall is accepted: gorun's ranks inherit its environment on this
// machine, and a note says what remote ranks get.
func TestGenvall(t *testing.T) {
	t.Parallel()
	r := runGorunIn(t, "", []string{"GORUN_TEST_GENVALL=yes"}, 30*time.Second, nil, "-genvall", "-np", "1", "sh", "-c", "echo $GORUN_TEST_GENVALL")
	if r.code != 0 || r.stdout != "yes\n" {
		t.Fatalf("exit %d, stdout %q, want 0 and yes:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "gorun: note: -genvall:") || !strings.Contains(r.stderr, "-x NAME") {
		t.Errorf("stderr lacks the note on remote ranks:\n%s", r.stderr)
	}
}

// Unknown flags, peer flags gorun does not take and peer values it does not
// share: one line on stderr naming the gorun way, nothing on stdout, exit
// status 2, and nothing started.
func TestPeerAndUnknownFlagsRefused(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	prog := []string{"sh", "-c", "touch " + marker}
	tests := []struct {
		args []string
		want string // the whole line, without "gorun: " and the newline
		bare bool   // no program follows
	}{
		{args: []string{"--tag-outptu", "-np", "1"}, want: "unknown flag --tag-outptu (did you mean --tag-output?)"},
		{args: []string{"-np", "1", "-tag-outptu=1"}, want: "unknown flag -tag-outptu (did you mean --tag-output?)"},
		{args: []string{"--frobnicate"}, want: "unknown flag --frobnicate (gorun --help lists them)"},
		{args: []string{"-qq"}, want: "unknown flag -qq (gorun --help lists them)"},
		// A peer's flag without its launcher's name names the personality.
		{args: []string{"-q"}, want: "-q is mpirun's: gorun mpirun -q ..."},
		{args: []string{"--allow-run-as-root", "-np", "1"}, want: "--allow-run-as-root is mpirun's: gorun mpirun --allow-run-as-root ..."},
		{args: []string{"-bynode"}, want: "-bynode is mpirun's: gorun mpirun -bynode ..."},
		{args: []string{"--gmca", "a", "b"}, want: "--gmca is mpirun's: gorun mpirun --gmca ..."},
		{args: []string{"-configfile", "cfg"}, want: "-configfile is mpiexec's: gorun mpiexec -configfile ..."},
		{args: []string{"--max_restarts=1", "-qqq"}, want: "unknown flag -qqq (gorun --help lists them)"},
		{args: []string{"--nproc_per", "2"}, want: "--nproc_per is torchrun's: gorun torchrun --nproc_per ..."},
		{args: []string{"-x", "A=1", "-genvnone"}, want: "-genvnone is mpiexec's: gorun mpiexec -genvnone ..."},
		{args: []string{"-n", "1", "--use_env"}, want: "--use_env is torchrun's: gorun torchrun --use_env ..."},
		// -nooversubscribe is mpirun's, never --oversubscribe's typo.
		{args: []string{"-nooversubscribe"}, want: "-nooversubscribe is mpirun's: gorun mpirun -nooversubscribe ..."},
		{args: []string{"--no-oversubscribe"}, want: "unknown flag --no-oversubscribe (gorun --help lists them)"},
		{args: []string{"--node_rank", "0"}, want: "--node_rank 0: the endpoint gives each node its rank (--rdzv-endpoint): drop it"},
		{args: []string{"--standalone"}, want: "--standalone: a job on one host needs no rendezvous: drop it"},
		{args: []string{"--rdzv_backend", "c10d"}, want: "--rdzv_backend c10d: gorun's per-node launch needs no backend: give --rdzv-endpoint HOST:PORT (and --rdzv-last-call, --rdzv-timeout for the timeouts); drop it"},
		{args: []string{"--master-addr", "10.0.0.1"}, want: "--master-addr 10.0.0.1: gorun sets MASTER_ADDR to rank 0's host (--iface picks the interface; -x MASTER_ADDR=10.0.0.1 forces it)"},
		{args: []string{"--master_port", "29500"}, want: "--master_port 29500: gorun picks a free MASTER_PORT (-x MASTER_PORT=29500 forces it)"},
		{args: []string{"-genv", "A"}, want: "-genv A: takes two values (NAME VALUE)", bare: true},
		{args: []string{"-l=1"}, want: "-l 1: takes no value"},
		{args: []string{"--bind-to", "hwthread", "-np", "1"}, want: `usage: --bind-to "hwthread": gorun binds whole cores, never one hardware thread of a core: use --bind-to core`},
		{args: []string{"--map-by", "hwthread", "-np", "1"}, want: `plan: --map-by "hwthread": gorun places ranks on whole cores, never one hardware thread of a core: use --map-by slot (with --bind-to core)`},
		{args: []string{"--map-by", "ppr:2:core"}, want: `plan: --map-by "ppr:2:core": want ppr:N:node, ppr:N:numa or ppr:N:package`},
		// A launcher as the program: every rank would start its own job.
		{args: []string{"-np", "2", "mpirun", "-np", "4", "./a"}, want: "usage: the program mpirun is a launcher: each of the 2 ranks would start a job of its own; run gorun mpirun -np 4 ./a (gorun reads mpirun's command line)", bare: true},
		{args: []string{"mpiexec.mpich", "-n", "2", "./a"}, want: "usage: the program mpiexec.mpich is a launcher: every rank would start a job of its own; run gorun mpiexec -n 2 ./a (gorun reads mpiexec's command line)", bare: true},
		{args: []string{"-np"}, want: "flag needs an argument: -np", bare: true},
		// Open MPI's launcher's parameters that gorun has no way for,
		// and srun's binding to CPU lists: refused with the way.
		{args: []string{"-mca", "rmaps", "seq", "-np", "1"}, want: "--map-by seq places one rank on each line of a hostfile: give --hostfile FILE (or -H's hosts in rank order with one slot each)"},
		{args: []string{"--mca", "plm_rsh_agent", "rsh"}, want: "--mca plm_rsh_agent rsh: gorun reaches hosts through its own SSH client, which reads ~/.ssh/config (--ssh-config FILE, --ssh-port PORT, -i KEY)"},
		{args: []string{"--cpu-bind=map_cpu:0,1", "-np", "1"}, want: "--cpu-bind map_cpu:0,1: map_cpu:0: gorun binds each rank to cores, NUMA nodes or packages (--bind-to core, numa or package); to place every rank on CPUs of your choosing, give a --rankfile FILE"},
		{args: []string{"--map-by", "slot:SPAN", "-np", "1"}, want: "--map-by slot:SPAN: SPAN: gorun maps each host on its own: give the count per host (--map-by ppr:N:node)"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if !tt.bare {
				args = append(append([]string(nil), tt.args...), prog...)
			}
			r := runGorun(t, 30*time.Second, nil, args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			if r.stdout != "" {
				t.Errorf("stdout is not empty:\n%s", r.stdout)
			}
			if want := "gorun: " + tt.want + "\n"; r.stderr != want {
				t.Errorf("stderr\n%q, want\n%q", r.stderr, want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the program ran")
			}
		})
	}
}

// Everything from the program's name on is the program's: peer spellings
// there are neither rewritten nor refused.
func TestProgramArgsUntouched(t *testing.T) {
	t.Parallel()
	args := []string{"--mca", "a", "b", "-genv", "c", "d", "-f", "x", "--tag-outptu", "--nproc-per-node", "2", "-genvall"}
	for _, pre := range [][]string{{"-np", "1"}, {"-np", "1", "--"}} {
		r := runGorun(t, 30*time.Second, nil, append(append(pre, "sh", "-c", `printf '%s\n' "$@"`, "x"), args...)...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if want := strings.Join(args, "\n") + "\n"; r.stdout != want {
			t.Errorf("the program got\n%q, want\n%q", r.stdout, want)
		}
		if r.stderr != "" {
			t.Errorf("stderr: %s", r.stderr)
		}
	}
}

// rewriteArgs keeps the arguments after the program, and a subcommand's,
// as they are.
func TestRewriteArgs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"gorun -np 2 -f h -ppn 2 prog -f x -ppn 3", "gorun -np 2 --hostfile h --npernode 2 prog -f x -ppn 3"},
		{"gorun --mca btl tcp -genv A 1 -genvlist B,C prog", "gorun -x OMPI_MCA_btl=tcp -x A=1 -x B -x C prog"},
		{"gorun -x -genv prog", "gorun -x -genv prog"}, // -genv is -x's value
		{"gorun -l --tag-output=false prog", "gorun --tag-output --tag-output=false prog"},
		{"gorun -- -genv A 1", "gorun -- -genv A 1"},
		{"gorun bench allreduce --iters 3", "gorun bench allreduce --iters 3"},
		{"gorun -genvall -np 1 prog", "gorun -np 1 prog"},
		// Open MPI's launcher's own MCA parameters, and its --map-by
		// modifiers, as gorun mpirun takes them.
		{"gorun -mca plm_rsh_args -p2222 --mca pml ob1 prog", "gorun --ssh-port 2222 -x OMPI_MCA_pml=ob1 prog"},
		{"gorun --mca plm_base_verbose 5 prog", "gorun prog"},
		{"gorun --map-by slot:PE=2 -np 1 prog", "gorun --map-by slot --cpus-per-rank 2 -np 1 prog"},
		{"gorun --map-by=ppr:2:socket prog", "gorun --map-by ppr:2:package prog"},
		{"gorun --map-by ppr:2:node --map-by=node prog", "gorun --map-by ppr:2:node --map-by node prog"},
		// srun's, where a batch script had srun.
		{"gorun --mpi=pmi2 prog", "gorun prog"},
		{"gorun --mpi pmix -np 2 prog", "gorun -np 2 prog"},
		{"gorun --mpi -np 2 prog", "gorun -np 2 prog"}, // horovodrun's switch: no value taken
		{"gorun --cpu-bind=verbose,cores --ntasks 2 --ntasks-per-node 1 --cpus-per-task 2 --label prog",
			"gorun --report-bindings --bind-to core -np 2 --npernode 1 --cpus-per-rank 2 --tag-output prog"},
		{"gorun --cpu-bind=sockets prog", "gorun --bind-to package prog"},
	}
	for _, tt := range tests {
		got, _, err := rewriteArgs(strings.Fields(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.in, g, tt.want)
		}
	}
}

// What changes nothing is taken with a note that says why.
func TestRewriteArgsNotes(t *testing.T) {
	for in, want := range map[string]string{
		"gorun --mpi=pmi2 prog":                 "--mpi pmi2: ignored: gorun serves PMI-1, PMI-2 and PMIx to the ranks itself, as each program needs",
		"gorun --mca plm_base_verbose 5 prog":   "--mca plm_base_verbose 5: ignored: a parameter of Open MPI's launcher (mpirun and its orted daemons), which gorun replaces; the ranks do not read it",
		"gorun -mca orte_tmpdir_base /tmp prog": "-mca orte_tmpdir_base /tmp: ignored: a parameter of Open MPI's launcher (mpirun and its orted daemons), which gorun replaces; the ranks do not read it",
	} {
		_, notes, err := rewriteArgs(strings.Fields(in))
		if err != nil || len(notes) != 1 || notes[0] != want {
			t.Errorf("%s: notes %q, %v; want %q", in, notes, err, want)
		}
	}
}

// TestManPageDocumentsPeerSpellings checks that OPTIONS in man/gorun.1
// shows every peer spelling gorun knows, as it is typed.
func TestManPageDocumentsPeerSpellings(t *testing.T) {
	t.Parallel()
	opts := manSection(t, readManPage(t, "gorun.1"), "OPTIONS")
	for _, n := range peerSpellings() {
		if !roffFlag(1, n).MatchString(opts) && !roffFlag(2, n).MatchString(opts) {
			t.Errorf("OPTIONS in man/gorun.1 does not show -%s or --%s", n, n)
		}
	}
}
