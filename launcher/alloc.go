package launcher

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hostfile"
)

// Backends (--launcher): how agents reach the job's hosts.
const (
	BackendAuto  = "auto"  // the resource manager's, when gorun runs inside an allocation; else local and SSH
	BackendLocal = "local" // this machine and SSH, ignoring any allocation
	BackendSSH   = "ssh"   // the same as local: hosts that are not this machine are reached over SSH
	BackendSlurm = "slurm" // agents through srun inside a Slurm allocation
	BackendPBS   = "pbs"   // hosts from PBS_NODEFILE, agents over SSH
)

// Allocation is a resource manager's grant that gorun runs inside: its
// hosts and slots, and how gorun found it.
type Allocation struct {
	// Kind is BackendSlurm or BackendPBS.
	Kind string
	// JobID is the resource manager's job id.
	JobID string
	// Hosts are the allocated hosts, each with its task slots.
	Hosts []hostfile.Host
	// NTasks is the number of tasks the allocation asked for
	// (SLURM_NTASKS); 0 when unknown. It can be less than the sum of the
	// slots: Slurm rounds tasks per node up.
	NTasks int
	// Why says how it was detected, for --display-map.
	Why string
}

// DetectAllocation looks for a resource manager's allocation in the
// environment (getenv), as --launcher asks: auto finds Slurm (SLURM_JOB_ID)
// or PBS (PBS_JOBID with PBS_NODEFILE); slurm and pbs require it; local and
// ssh ignore it. It returns nil when there is none to use.
func DetectAllocation(getenv func(string) string, backend string) (*Allocation, error) {
	switch backend {
	case "", BackendAuto:
		if getenv("SLURM_JOB_ID") != "" {
			return slurmAllocation(getenv, "SLURM_JOB_ID="+getenv("SLURM_JOB_ID")+" is set")
		}
		if getenv("PBS_JOBID") != "" && getenv("PBS_NODEFILE") != "" {
			return pbsAllocation(getenv, "PBS_JOBID="+getenv("PBS_JOBID")+" is set")
		}
		return nil, nil
	case BackendLocal, BackendSSH:
		return nil, nil
	case BackendSlurm:
		if getenv("SLURM_JOB_ID") == "" {
			return nil, fmt.Errorf("%w: --launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set; run gorun in sbatch or salloc)", ErrUsage)
		}
		return slurmAllocation(getenv, "--launcher slurm")
	case BackendPBS:
		if getenv("PBS_NODEFILE") == "" {
			return nil, fmt.Errorf("%w: --launcher pbs: not inside a PBS job (PBS_NODEFILE is not set)", ErrUsage)
		}
		return pbsAllocation(getenv, "--launcher pbs")
	}
	if backend == "fork" {
		// Hydra's: every rank on this machine, its hosts unused.
		return nil, fmt.Errorf("%w: --launcher fork is mpiexec's: gorun mpiexec -launcher fork ... (or leave out -f and -H: plain gorun runs every rank here)", ErrUsage)
	}
	return nil, fmt.Errorf("%w: --launcher %q: want auto, local, ssh, slurm or pbs", ErrUsage, backend)
}

func slurmAllocation(getenv func(string) string, why string) (*Allocation, error) {
	first := func(names ...string) (string, string) {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return n, v
			}
		}
		return names[0], ""
	}
	nlName, nodelist := first("SLURM_JOB_NODELIST", "SLURM_NODELIST")
	tpName, tasks := first("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE")
	if nodelist == "" || tasks == "" {
		return nil, fmt.Errorf("%w: Slurm allocation %s: %s or %s is not set", ErrUsage, getenv("SLURM_JOB_ID"), nlName, tpName)
	}
	hosts, err := hostfile.FromSlurm(nodelist, tasks)
	if err != nil {
		return nil, fmt.Errorf("%w: Slurm allocation %s: %s=%q, %s=%q: %w", ErrUsage, getenv("SLURM_JOB_ID"), nlName, nodelist, tpName, tasks, err)
	}
	a := &Allocation{Kind: BackendSlurm, JobID: getenv("SLURM_JOB_ID"), Hosts: hosts,
		Why: fmt.Sprintf("%s: %s=%s, %s=%s", why, nlName, nodelist, tpName, tasks)}
	if _, v := first("SLURM_NTASKS", "SLURM_NPROCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: Slurm allocation %s: SLURM_NTASKS=%q is not a count of tasks", ErrUsage, a.JobID, v)
		}
		a.NTasks = n
		a.Why += ", SLURM_NTASKS=" + v
	}
	return a, nil
}

func pbsAllocation(getenv func(string) string, why string) (*Allocation, error) {
	path := getenv("PBS_NODEFILE")
	hosts, err := hostfile.ParsePBSNodefile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: PBS job %s: %w", ErrUsage, getenv("PBS_JOBID"), err)
	}
	return &Allocation{Kind: BackendPBS, JobID: getenv("PBS_JOBID"), Hosts: hosts,
		Why: fmt.Sprintf("%s: PBS_NODEFILE=%s", why, path)}, nil
}

// Name is how messages name the allocation: "Slurm job 42".
func (a *Allocation) Name() string {
	kind := "Slurm"
	if a.Kind == BackendPBS {
		kind = "PBS"
	}
	return kind + " job " + a.JobID
}

// Select checks that hosts (from a hostfile or -H inside the allocation)
// are all allocated, and caps each one's slots at the allocation's.
func (a *Allocation) Select(hosts []hostfile.Host, source string) ([]hostfile.Host, error) {
	slots := map[string]int{}
	var names []string
	for _, h := range a.Hosts {
		slots[h.Name] = h.Slots
		names = append(names, h.Name)
	}
	out := make([]hostfile.Host, 0, len(hosts))
	for _, h := range hosts {
		n, ok := slots[h.Name]
		if !ok {
			hint := ""
			if s := hostfile.Closest(h.Name, names); s != "" {
				hint = " (did you mean " + s + "?)"
			}
			return nil, fmt.Errorf("%w: %s: host %s is not in %s%s (its hosts: %s)", ErrUsage, source, h.Name, a.Name(), hint, strings.Join(names, ","))
		}
		h.Slots = min(h.Slots, n)
		out = append(out, h)
	}
	return out, nil
}
