package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
