package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorun/gorun/hostfile"
)

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// Allocations are found from the variables Slurm and PBS set (the Slurm
// values are ones a real 22.05 batch job had), and refused with a message
// that names the variable when they do not add up.
func TestDetectAllocation(t *testing.T) {
	t.Parallel()
	nodefile := filepath.Join(t.TempDir(), "nodes")
	os.WriteFile(nodefile, []byte("n1\nn1\nn2\n"), 0o644)
	for _, tt := range []struct {
		name    string
		env     map[string]string
		backend string
		want    string // hosts as name:slots, and ntasks
		err     string
	}{
		{"none", nil, "auto", "<nil>", ""},
		{"slurm", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_NTASKS": "8"}, "auto", "node01:4 node02:4 ntasks=8", ""},
		{"slurm rounded up", map[string]string{"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "node[01-03]", "SLURM_TASKS_PER_NODE": "4,3,1", "SLURM_NTASKS": "7"}, "auto", "node01:4 node02:3 node03:1 ntasks=7", ""},
		{"slurm without ntasks", map[string]string{"SLURM_JOB_ID": "9", "SLURM_NODELIST": "a,b", "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}, "auto", "a:2 b:2 ntasks=0", ""},
		{"slurm ignored", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node01", "SLURM_TASKS_PER_NODE": "4"}, "ssh", "<nil>", ""},
		{"slurm asked, absent", nil, "slurm", "", "not inside a Slurm allocation"},
		{"slurm mismatch", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[01-03]", "SLURM_TASKS_PER_NODE": "4(x2)"}, "auto", "", "SLURM_TASKS_PER_NODE"},
		{"slurm no nodelist", map[string]string{"SLURM_JOB_ID": "7"}, "auto", "", "SLURM_JOB_NODELIST"},
		{"slurm bad ntasks", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "1", "SLURM_NTASKS": "x"}, "auto", "", "SLURM_NTASKS"},
		{"pbs", map[string]string{"PBS_JOBID": "3.srv", "PBS_NODEFILE": nodefile}, "auto", "n1:2 n2:1 ntasks=0", ""},
		{"pbs missing file", map[string]string{"PBS_JOBID": "3.srv", "PBS_NODEFILE": nodefile + ".gone"}, "auto", "", "nodes.gone"},
		{"bad backend", nil, "ll", "", "--launcher \"ll\""},
		{"lsf outside a job", nil, "lsf", "", "not inside an LSF job"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := DetectAllocation(envOf(tt.env), tt.backend)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrUsage) {
					t.Fatalf("err = %v, want a usage error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := "<nil>"
			if a != nil {
				var parts []string
				for _, h := range a.Hosts {
					parts = append(parts, fmt.Sprintf("%s:%d", h.Name, h.Slots))
				}
				got = strings.Join(parts, " ") + fmt.Sprintf(" ntasks=%d", a.NTasks)
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// A host list inside an allocation may only choose among its hosts.
func TestAllocationSelect(t *testing.T) {
	t.Parallel()
	a := &Allocation{Kind: BackendSlurm, JobID: "7", Hosts: []hostfile.Host{{Name: "node01", Slots: 4}, {Name: "node02", Slots: 4}}}
	src := HostSource{HostList: []string{"node02:2"}, Alloc: a}
	hosts, _, desc, err := src.Hosts()
	if err != nil || len(hosts) != 1 || hosts[0].Name != "node02" || hosts[0].Slots != 2 || !strings.Contains(desc, "Slurm job 7") {
		t.Errorf("-H node02:2: %v %q %v", hosts, desc, err)
	}
	src = HostSource{HostList: []string{"node02:8"}, Alloc: a}
	if hosts, _, _, _ := src.Hosts(); len(hosts) != 1 || hosts[0].Slots != 4 {
		t.Errorf("-H node02:8 inside 4 slots: %v", hosts)
	}
	src = HostSource{HostList: []string{"node01,node09"}, Alloc: a}
	if _, _, _, err := src.Hosts(); err == nil || !strings.Contains(err.Error(), "host node09 is not in Slurm job 7") {
		t.Errorf("-H with a host outside: %v", err)
	}
	src = HostSource{Alloc: a}
	if hosts, implicit, desc, err := src.Hosts(); err != nil || len(hosts) != 2 || implicit || desc != "Slurm job 7" {
		t.Errorf("no host source: %v %v %q %v", hosts, implicit, desc, err)
	}
}

// The srun line is the one that works on Slurm 22.05: one task per node,
// overlapping the job's other steps, the whole step killed when one fails.
func TestSrunArgs(t *testing.T) {
	got := strings.Join(SrunArgs("/opt/gorun", []string{"node02", "node03"}, "10.0.0.1:5"), " ")
	for _, want := range []string{"--overlap", "--kill-on-bad-exit=1", "--cpu-bind=none", "--nodes=2", "--ntasks=2",
		"--ntasks-per-node=1", "--nodelist=node02,node03", "/opt/gorun agent --connect 10.0.0.1:5"} {
		if !strings.Contains(got, want) {
			t.Errorf("srun %s lacks %s", got, want)
		}
	}
}

// --nolocal leaves out the hosts that are this machine, as mpirun
// -nolocal does, and a list of this machine alone is refused, naming the
// list.
func TestHostSourceNoLocal(t *testing.T) {
	hosts, _, desc, err := HostSource{HostList: []string{"localhost:2,127.0.0.1,node8:4,node7"}, NoLocal: true}.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, fmt.Sprintf("%s:%d", h.Name, h.Slots))
	}
	if got := strings.Join(names, ","); got != "node8:4,node7:1" {
		t.Errorf("hosts = %s, want node8:4,node7:1", got)
	}
	if !strings.HasSuffix(desc, " --nolocal") {
		t.Errorf("desc = %q, want it to say --nolocal", desc)
	}
	_, _, _, err = HostSource{HostList: []string{"localhost:2"}, NoLocal: true}.Hosts()
	if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "-H localhost:2 is this machine") {
		t.Errorf("--nolocal with -H localhost:2: err = %v, want a usage error naming -H localhost:2", err)
	}
	if hosts, _, _, err := (HostSource{NoLocal: false, HostList: []string{"localhost:2"}}).Hosts(); err != nil || len(hosts) != 1 {
		t.Errorf("without --nolocal: %v, %v", hosts, err)
	}
}

// A launcher gorun does not have is refused naming those it has; Hydra's
// fork names the personality that takes it (migrants #25, plain gorun).
func TestDetectAllocationUnknownLauncher(t *testing.T) {
	for backend, want := range map[string]string{
		"rsh":  `--launcher "rsh": want auto, local, ssh, slurm (or srun), sge (or qrsh), lsf (or blaunch), pbs (or pbs_tmrsh) and flux`,
		"fork": "--launcher fork is mpiexec's: gorun mpiexec -launcher fork",
	} {
		_, err := DetectAllocation(func(string) string { return "" }, backend)
		if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), want) {
			t.Errorf("--launcher %s: err = %v, want a usage error containing %q", backend, err, want)
		}
	}
}

// standIns writes executable scripts (name -> body, after "#!/bin/sh")
// into a new directory, and returns it.
func standIns(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fluxStandIn answers the two questions fluxAllocation asks a Flux
// instance as flux would, with hostlist and counts ("NODES CORES").
func fluxStandIn(hostlist, counts string) string {
	return fmt.Sprintf(`case "$*" in
"getattr hostlist") echo %q ;;
"resource list --states=all --no-header --format={nnodes} {ncores}") echo %q ;;
*) echo "flux: unexpected: $*" >&2; exit 1 ;;
esac
`, hostlist, counts)
}

// Grid Engine, LSF, PBS and Flux are found by --launcher auto from the
// variables each sets, or asked for by the batch system's name or its
// launcher's; the launcher is looked for in getenv's PATH (only there:
// not in the test's own). Without blaunch or pbs_tmrsh the agents go
// over SSH, with a note that says so; a launcher asked for by name, and
// Grid Engine's qrsh and Flux's flux, which gorun has no SSH fallback
// for, are required: their absence is a usage error naming them.
func TestDetectBatchAllocation(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	pe := filepath.Join(tmp, "pe_hostfile")
	os.WriteFile(pe, []byte("node01 4 all.q@node01 UNDEFINED\nnode02 2 all.q@node02 UNDEFINED\nnode01 1 gpu.q@node01 UNDEFINED\n"), 0o644)
	badPE := filepath.Join(tmp, "bad_pe")
	os.WriteFile(badPE, []byte("node01 four all.q@node01 UNDEFINED\n"), 0o644)
	djob := filepath.Join(tmp, "djob")
	os.WriteFile(djob, []byte("node01\nnode01\nnode02\n"), 0o644)
	nodefile := filepath.Join(tmp, "nodes")
	os.WriteFile(nodefile, []byte("n1\nn1\nn2\n"), 0o644)

	bin := standIns(t, map[string]string{"qrsh": "exit 0\n", "blaunch": "exit 0\n", "pbs_tmrsh": "exit 0\n",
		"flux": fluxStandIn("fx[1-3]", "3 24")})
	empty := t.TempDir()
	fluxBad := standIns(t, map[string]string{"flux": "echo 'flux-getattr: flux_open: No such file or directory' >&2; exit 1\n"})
	fluxOdd := standIns(t, map[string]string{"flux": fluxStandIn("fx[1-2]", "two 8")})
	fluxFewCores := standIns(t, map[string]string{"flux": fluxStandIn("fx[1-2]", "2 1")})
	fluxBadList := standIns(t, map[string]string{"flux": fluxStandIn("fx[1-", "2 8")})
	notExec := t.TempDir()
	os.WriteFile(filepath.Join(notExec, "blaunch"), []byte("#!/bin/sh\n"), 0o644)

	sge := map[string]string{"JOB_ID": "12", "PE_HOSTFILE": pe}
	lsfMCPU := map[string]string{"LSB_JOBID": "5", "LSB_MCPU_HOSTS": "node01 2 node02 2"}
	lsfDJob := map[string]string{"LSB_JOBID": "6", "LSB_DJOB_HOSTFILE": djob, "LSB_MCPU_HOSTS": "ignored 9"}
	pbs := map[string]string{"PBS_JOBID": "3.srv", "PBS_NODEFILE": nodefile}
	flux := map[string]string{"FLUX_JOB_ID": "f2Xq", "FLUX_URI": "local:///run/flux/local"}
	with := func(env map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range env {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		env      map[string]string
		backend  string
		want     string // kind launcher hosts (name:slots)
		path     string // the launcher's path, when found
		note     string // in Note; "" wants none
		why, err string
	}{
		{name: "sge auto", env: with(sge, "PATH", bin), backend: "auto", want: "sge qrsh node01:5 node02:2", path: bin + "/qrsh",
			why: "JOB_ID=12 and PE_HOSTFILE are set: PE_HOSTFILE=" + pe},
		{name: "sge named", env: with(sge, "PATH", bin), backend: "sge", want: "sge qrsh node01:5 node02:2", path: bin + "/qrsh"},
		{name: "qrsh named", env: with(sge, "PATH", "relative:"+bin), backend: "qrsh", want: "sge qrsh node01:5 node02:2", path: bin + "/qrsh"},
		{name: "sge without qrsh", env: with(sge, "PATH", empty), backend: "auto", err: "Grid Engine job 12: qrsh is not in PATH (" + empty + ")"},
		{name: "sge without PE_HOSTFILE", env: map[string]string{"JOB_ID": "12", "PATH": bin}, backend: "sge", err: "PE_HOSTFILE is not set"},
		{name: "sge JOB_ID alone", env: map[string]string{"JOB_ID": "12", "PATH": bin}, backend: "auto", want: "<nil>"},
		{name: "sge bad PE_HOSTFILE", env: with(sge, "PE_HOSTFILE", badPE, "PATH", bin), backend: "auto", err: "Grid Engine job 12: hostfile " + badPE + ":1: bad slot count value"},

		{name: "lsf auto", env: with(lsfMCPU, "PATH", bin), backend: "auto", want: "lsf blaunch node01:2 node02:2", path: bin + "/blaunch",
			why: "LSB_JOBID=5 is set: LSB_MCPU_HOSTS=node01 2 node02 2"},
		{name: "lsf djob hostfile first", env: with(lsfDJob, "PATH", bin), backend: "lsf", want: "lsf blaunch node01:2 node02:1", path: bin + "/blaunch",
			why: "--launcher lsf: LSB_DJOB_HOSTFILE=" + djob},
		{name: "lsf without blaunch", env: with(lsfMCPU, "PATH", empty), backend: "auto", want: "lsf ssh node01:2 node02:2",
			note: "blaunch is not in PATH: agents on other hosts over SSH, outside LSF job 5's accounting"},
		{name: "lsf named without blaunch", env: with(lsfMCPU, "PATH", empty), backend: "lsf", want: "lsf ssh node01:2 node02:2", note: "blaunch is not in PATH"},
		{name: "lsf blaunch not executable", env: with(lsfMCPU, "PATH", notExec), backend: "auto", want: "lsf ssh node01:2 node02:2", note: "blaunch is not in PATH"},
		{name: "blaunch required", env: with(lsfMCPU, "PATH", empty), backend: "blaunch", err: "--launcher blaunch: blaunch is not in PATH"},
		{name: "blaunch named", env: with(lsfMCPU, "PATH", bin), backend: "blaunch", want: "lsf blaunch node01:2 node02:2", path: bin + "/blaunch"},
		{name: "lsf LSB_JOBID alone", env: map[string]string{"LSB_JOBID": "5"}, backend: "auto", want: "<nil>"},
		{name: "lsf outside a job", env: map[string]string{"PATH": bin}, backend: "blaunch", err: "not inside an LSF job"},
		{name: "lsf odd LSB_MCPU_HOSTS", env: with(lsfMCPU, "LSB_MCPU_HOSTS", "node01 2 node02", "PATH", bin), backend: "auto", err: "LSF job 5: hostfile: LSB_MCPU_HOSTS \"node01 2 node02\": want pairs"},

		{name: "pbs with pbs_tmrsh", env: with(pbs, "PATH", bin), backend: "auto", want: "pbs pbs_tmrsh n1:2 n2:1", path: bin + "/pbs_tmrsh"},
		{name: "pbs without pbs_tmrsh", env: with(pbs, "PATH", empty), backend: "pbs", want: "pbs ssh n1:2 n2:1",
			note: "pbs_tmrsh is not in PATH: agents on other hosts over SSH, outside PBS job 3.srv's accounting"},
		{name: "pbs_tmrsh required", env: with(pbs, "PATH", empty), backend: "pbs_tmrsh", err: "--launcher pbs_tmrsh: pbs_tmrsh is not in PATH"},
		{name: "pbs_tmrsh named", env: with(pbs, "PATH", bin), backend: "pbs_tmrsh", want: "pbs pbs_tmrsh n1:2 n2:1", path: bin + "/pbs_tmrsh"},
		{name: "pbs_tmrsh outside a job", env: map[string]string{"PATH": bin}, backend: "pbs_tmrsh", err: "not inside a PBS job"},

		{name: "flux auto", env: with(flux, "PATH", bin), backend: "auto", want: "flux flux fx1:8 fx2:8 fx3:8", path: bin + "/flux",
			why: "FLUX_JOB_ID=f2Xq is set: flux getattr hostlist: fx[1-3], 24 cores on 3 nodes"},
		{name: "flux named", env: with(flux, "PATH", bin), backend: "flux", want: "flux flux fx1:8 fx2:8 fx3:8", path: bin + "/flux"},
		{name: "flux without flux", env: with(flux, "PATH", empty), backend: "auto", err: "Flux job f2Xq: flux is not in PATH"},
		{name: "flux named without flux", env: with(flux, "PATH", empty), backend: "flux", err: "--launcher flux: flux is not in PATH"},
		{name: "sge named without qrsh", env: with(sge, "PATH", empty), backend: "sge", err: "--launcher sge: qrsh is not in PATH"},
		{name: "flux outside an instance", env: map[string]string{"FLUX_JOB_ID": "f2Xq", "PATH": bin}, backend: "flux", err: "FLUX_URI is not set"},
		{name: "flux FLUX_JOB_ID alone", env: map[string]string{"FLUX_JOB_ID": "f2Xq", "PATH": bin}, backend: "auto", want: "<nil>"},
		{name: "flux fails", env: with(flux, "PATH", fluxBad), backend: "auto", err: "Flux job f2Xq: flux getattr hostlist: exit status 1: flux-getattr: flux_open: No such file or directory"},
		{name: "flux odd counts", env: with(flux, "PATH", fluxOdd), backend: "auto", err: `flux resource list printed "two 8", want nodes and cores`},
		{name: "flux fewer cores than nodes", env: with(flux, "PATH", fluxFewCores), backend: "auto", err: `flux resource list printed "2 1"`},
		{name: "flux bad hostlist", env: with(flux, "PATH", fluxBadList), backend: "auto", err: "Flux job f2Xq: flux getattr hostlist: "},

		{name: "slurm before the others", env: with(lsfMCPU, "SLURM_JOB_ID", "7", "SLURM_JOB_NODELIST", "s1", "SLURM_TASKS_PER_NODE", "1", "PATH", bin), backend: "auto", want: "slurm srun s1:1"},
		{name: "local ignores lsf", env: with(lsfMCPU, "PATH", bin), backend: "local", want: "<nil>"},
		{name: "ssh ignores flux", env: with(flux, "PATH", bin), backend: "ssh", want: "<nil>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := DetectAllocation(envOf(tt.env), tt.backend)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrUsage) {
					t.Fatalf("err = %v, want a usage error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := "<nil>"
			if a != nil {
				parts := []string{a.Kind, a.Launcher}
				for _, h := range a.Hosts {
					parts = append(parts, fmt.Sprintf("%s:%d", h.Name, h.Slots))
				}
				got = strings.Join(parts, " ")
			}
			if got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if a == nil {
				return
			}
			if a.Kind != BackendSlurm && a.LauncherPath != tt.path {
				t.Errorf("LauncherPath = %q, want %q", a.LauncherPath, tt.path)
			}
			if tt.note == "" && a.Note != "" || !strings.Contains(a.Note, tt.note) {
				t.Errorf("Note = %q, want %q", a.Note, tt.note)
			}
			if tt.why != "" && a.Why != tt.why {
				t.Errorf("Why = %q, want %q", a.Why, tt.why)
			}
			if line := backendLine(a); !strings.HasPrefix(line, a.Kind+": "+a.Name()+"; agents on other hosts through ") || tt.note != "" && !strings.Contains(line, tt.note) {
				t.Errorf("backendLine = %q", line)
			}
		})
	}
}

// Each launcher's command line for a host is the batch system's own:
// qrsh -inherit HOST, blaunch HOST, pbs_tmrsh HOST, flux exec
// --rank=RANK (the host's place in the instance's hostlist); srun and SSH
// have starters of their own.
func TestCommandStarterPrefix(t *testing.T) {
	t.Parallel()
	hosts := []hostfile.Host{{Name: "fx1", Slots: 2}, {Name: "fx2", Slots: 2}, {Name: "fx3", Slots: 2}}
	for _, tt := range []struct {
		kind, launcher, host, want, err string
	}{
		{BackendSGE, LauncherQrsh, "fx2", "/opt/sge/bin/qrsh -inherit fx2", ""},
		{BackendLSF, LauncherBlaunch, "fx3", "/opt/sge/bin/blaunch fx3", ""},
		{BackendPBS, LauncherPBSTmrsh, "fx1", "/opt/sge/bin/pbs_tmrsh fx1", ""},
		{BackendFlux, LauncherFlux, "fx3", "/opt/sge/bin/flux exec --rank=2", ""},
		{BackendFlux, LauncherFlux, "fx9", "", "host fx9 is not in Flux job 9"},
		{BackendSlurm, LauncherSrun, "", "", ""},
		{BackendLSF, LauncherSSH, "", "", ""},
	} {
		a := &Allocation{Kind: tt.kind, Launcher: tt.launcher, LauncherPath: "/opt/sge/bin/" + tt.launcher, JobID: "9", Hosts: hosts}
		s := NewCommandStarter(a, "/opt/gorun", io.Discard)
		if tt.host == "" {
			if s != nil {
				t.Errorf("%s: NewCommandStarter = %+v, want nil", tt.launcher, s)
			}
			continue
		}
		if s == nil || s.Exe != "/opt/gorun" || s.Name != tt.launcher {
			t.Fatalf("%s: NewCommandStarter = %+v", tt.launcher, s)
		}
		argv, err := s.Prefix(hostfile.Host{Name: tt.host})
		if tt.err != "" {
			if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s %s: err = %v, want %q", tt.launcher, tt.host, err, tt.err)
			}
			continue
		}
		if got := strings.Join(argv, " "); err != nil || got != tt.want {
			t.Errorf("%s %s: %q, %v, want %q", tt.launcher, tt.host, got, err, tt.want)
		}
	}
}

// An agent whose launcher fails says so with the launcher's last line of
// diagnostics, naming the launcher and the host, instead of a bare EOF.
func TestCommandStarterLauncherFails(t *testing.T) {
	t.Parallel()
	bin := standIns(t, map[string]string{"blaunch": "echo 'blaunch: first' >&2; echo \"blaunch: cannot reach $1\" >&2; exit 1\n"})
	a := &Allocation{Kind: BackendLSF, Launcher: LauncherBlaunch, LauncherPath: bin + "/blaunch", JobID: "5"}
	var stderr strings.Builder
	s := NewCommandStarter(a, "/opt/gorun", &lockedBuilder{b: &stderr})
	p, err := s.StartAgent(context.Background(), hostfile.Host{Name: "node02"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(p)
	if want := "blaunch to node02 ended: blaunch: cannot reach node02"; len(b) != 0 || err == nil || err.Error() != want {
		t.Errorf("read %q, %v, want the error %q", b, err, want)
	}
	if err := p.Wait(); err == nil {
		t.Error("Wait: nil, want the launcher's exit status")
	}
	if r, ok := p.(Remote); !ok || !r.Remote() {
		t.Error("an agent started through blaunch is not Remote")
	}
}

// lockedBuilder is a strings.Builder safe for the launcher's stderr copier.
type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// --launch-fanout auto makes no launch tree where the batch system's own
// launcher starts the agents, however many hosts: a tree's lower agents
// would start theirs over SSH, outside its accounting. Where the agents
// go over SSH anyway (no blaunch or pbs_tmrsh), auto's tree is kept, and
// a fanout given is kept everywhere.
func TestEffectiveFanoutBatch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		kind, launcher string
		fanout, want   int
	}{
		{BackendSGE, LauncherQrsh, FanoutAuto, 0},
		{BackendLSF, LauncherBlaunch, FanoutAuto, 0},
		{BackendPBS, LauncherPBSTmrsh, FanoutAuto, 0},
		{BackendFlux, LauncherFlux, FanoutAuto, 0},
		{BackendLSF, LauncherSSH, FanoutAuto, DefaultFanout},
		{BackendPBS, LauncherSSH, FanoutAuto, DefaultFanout},
		{BackendLSF, LauncherBlaunch, 8, 8},
	} {
		o := Options{Fanout: tt.fanout, Alloc: &Allocation{Kind: tt.kind, Launcher: tt.launcher}}
		if got := EffectiveFanout(o, 4096); got != tt.want {
			t.Errorf("%s through %s, fanout %d, 4096 hosts: %d, want %d", tt.kind, tt.launcher, tt.fanout, got, tt.want)
		}
	}
}
