package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hostfile"
)

// Backends (--launcher): how agents reach the job's hosts. An allocation's
// Kind is one of slurm, pbs, sge, lsf and flux; its Launcher is the
// command that starts its agents on the other hosts.
const (
	BackendAuto  = "auto"  // the resource manager's, when gorun runs inside an allocation; else local and SSH
	BackendLocal = "local" // this machine and SSH, ignoring any allocation
	BackendSSH   = "ssh"   // the same as local: hosts that are not this machine are reached over SSH
	BackendSlurm = "slurm" // agents through srun inside a Slurm allocation
	BackendPBS   = "pbs"   // hosts from PBS_NODEFILE, agents through pbs_tmrsh (PBS's TM interface) where it is found, else SSH
	BackendSGE   = "sge"   // Grid Engine: hosts from PE_HOSTFILE, agents through qrsh -inherit (tight integration)
	BackendLSF   = "lsf"   // LSF: hosts from LSB_DJOB_HOSTFILE or LSB_MCPU_HOSTS, agents through blaunch where it is found, else SSH
	BackendFlux  = "flux"  // Flux: hosts from the instance (flux getattr hostlist), agents through flux exec
)

// The launchers' commands, which --launcher also takes by name (as
// Hydra's -launcher does): each requires its batch system.
const (
	LauncherSrun     = "srun"
	LauncherQrsh     = "qrsh"
	LauncherBlaunch  = "blaunch"
	LauncherPBSTmrsh = "pbs_tmrsh"
	LauncherFlux     = "flux"
	LauncherSSH      = "ssh"
)

// Launchers lists --launcher's values, for its help and its errors.
const Launchers = "auto, local, ssh, slurm (or srun), sge (or qrsh), lsf (or blaunch), pbs (or pbs_tmrsh) and flux"

// Allocation is a resource manager's grant that gorun runs inside: its
// hosts and slots, and how gorun found it.
type Allocation struct {
	// Kind is the batch system: BackendSlurm, BackendPBS, BackendSGE,
	// BackendLSF or BackendFlux.
	Kind string
	// Launcher is the command that starts the agents of the hosts other
	// than this one (LauncherSrun, ...; LauncherSSH where the batch
	// system's own is not found), and LauncherPath where it was found.
	Launcher, LauncherPath string
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
	// Note, when set, says why the agents do not start through the batch
	// system's own launcher (not found: SSH instead).
	Note string
}

// DetectAllocation looks for a resource manager's allocation in the
// environment (getenv), as --launcher asks: auto finds Slurm
// (SLURM_JOB_ID), PBS (PBS_JOBID with PBS_NODEFILE), Grid Engine (JOB_ID
// with PE_HOSTFILE), LSF (LSB_JOBID with LSB_DJOB_HOSTFILE or
// LSB_MCPU_HOSTS) or Flux (FLUX_JOB_ID with FLUX_URI); a batch system's
// name, or its launcher's, requires it; local and ssh ignore it. It
// returns nil when there is none to use. Commands (qrsh, blaunch,
// pbs_tmrsh, flux) are looked for in getenv's PATH.
func DetectAllocation(getenv func(string) string, backend string) (*Allocation, error) {
	switch backend {
	case "", BackendAuto:
		switch {
		case getenv("SLURM_JOB_ID") != "":
			return slurmAllocation(getenv, "SLURM_JOB_ID="+getenv("SLURM_JOB_ID")+" is set")
		case getenv("PBS_JOBID") != "" && getenv("PBS_NODEFILE") != "":
			return pbsAllocation(getenv, "PBS_JOBID="+getenv("PBS_JOBID")+" is set", "")
		case getenv("JOB_ID") != "" && getenv("PE_HOSTFILE") != "":
			return sgeAllocation(getenv, "JOB_ID="+getenv("JOB_ID")+" and PE_HOSTFILE are set", "")
		case getenv("LSB_JOBID") != "" && (getenv("LSB_DJOB_HOSTFILE") != "" || getenv("LSB_MCPU_HOSTS") != ""):
			return lsfAllocation(getenv, "LSB_JOBID="+getenv("LSB_JOBID")+" is set", "")
		case getenv("FLUX_JOB_ID") != "" && getenv("FLUX_URI") != "":
			return fluxAllocation(getenv, "FLUX_JOB_ID="+getenv("FLUX_JOB_ID")+" is set", "")
		}
		return nil, nil
	case BackendLocal, BackendSSH:
		return nil, nil
	case BackendSlurm, LauncherSrun:
		if getenv("SLURM_JOB_ID") == "" {
			return nil, fmt.Errorf("%w: --launcher %s: not inside a Slurm allocation (SLURM_JOB_ID is not set; run gorun in sbatch or salloc)", ErrUsage, backend)
		}
		return slurmAllocation(getenv, "--launcher "+backend)
	case BackendPBS, LauncherPBSTmrsh:
		if getenv("PBS_NODEFILE") == "" {
			return nil, fmt.Errorf("%w: --launcher %s: not inside a PBS job (PBS_NODEFILE is not set)", ErrUsage, backend)
		}
		return pbsAllocation(getenv, "--launcher "+backend, backend)
	case BackendSGE, LauncherQrsh:
		if getenv("PE_HOSTFILE") == "" {
			return nil, fmt.Errorf("%w: --launcher %s: not inside a Grid Engine job of a parallel environment (PE_HOSTFILE is not set; qsub -pe NAME SLOTS)", ErrUsage, backend)
		}
		return sgeAllocation(getenv, "--launcher "+backend, backend)
	case BackendLSF, LauncherBlaunch:
		if getenv("LSB_DJOB_HOSTFILE") == "" && getenv("LSB_MCPU_HOSTS") == "" {
			return nil, fmt.Errorf("%w: --launcher %s: not inside an LSF job (LSB_DJOB_HOSTFILE and LSB_MCPU_HOSTS are not set)", ErrUsage, backend)
		}
		return lsfAllocation(getenv, "--launcher "+backend, backend)
	case BackendFlux:
		if getenv("FLUX_URI") == "" {
			return nil, fmt.Errorf("%w: --launcher flux: not inside a Flux instance (FLUX_URI is not set; flux alloc or flux batch)", ErrUsage)
		}
		return fluxAllocation(getenv, "--launcher flux", BackendFlux)
	}
	if backend == "fork" {
		// Hydra's: every rank on this machine, its hosts unused.
		return nil, fmt.Errorf("%w: --launcher fork is mpiexec's: gorun mpiexec -launcher fork ... (or leave out -f and -H: plain gorun runs every rank here)", ErrUsage)
	}
	return nil, fmt.Errorf("%w: --launcher %q: want %s", ErrUsage, backend, Launchers)
}

// lookPath finds command name in getenv's PATH: its path, or "".
func lookPath(getenv func(string) string, name string) string {
	for _, dir := range filepath.SplitList(getenv("PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry is the working directory's: not a launcher
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// launchWith sets a's launcher: the batch system's command where getenv's
// PATH has it, else SSH with a note; required refuses SSH, naming asked
// (the --launcher value given; "" for auto).
func (a *Allocation) launchWith(getenv func(string) string, command string, required bool, asked string) error {
	if a.LauncherPath = lookPath(getenv, command); a.LauncherPath != "" {
		a.Launcher = command
		return nil
	}
	if required {
		where := a.Name()
		if asked != "" && asked != BackendAuto {
			where = "--launcher " + asked
		}
		return fmt.Errorf("%w: %s: %s is not in PATH (%s); it starts the agents of the other hosts", ErrUsage, where, command, getenv("PATH"))
	}
	a.Launcher = LauncherSSH
	a.Note = fmt.Sprintf("%s is not in PATH: agents on other hosts over SSH, outside %s's accounting", command, a.Name())
	return nil
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
	a := &Allocation{Kind: BackendSlurm, Launcher: LauncherSrun, JobID: getenv("SLURM_JOB_ID"), Hosts: hosts,
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

func pbsAllocation(getenv func(string) string, why, asked string) (*Allocation, error) {
	path := getenv("PBS_NODEFILE")
	hosts, err := hostfile.ParsePBSNodefile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: PBS job %s: %w", ErrUsage, getenv("PBS_JOBID"), err)
	}
	a := &Allocation{Kind: BackendPBS, JobID: getenv("PBS_JOBID"), Hosts: hosts,
		Why: fmt.Sprintf("%s: PBS_NODEFILE=%s", why, path)}
	return a, a.launchWith(getenv, LauncherPBSTmrsh, asked == LauncherPBSTmrsh, asked)
}

func sgeAllocation(getenv func(string) string, why, asked string) (*Allocation, error) {
	path := getenv("PE_HOSTFILE")
	hosts, err := hostfile.ParsePEHostfile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: Grid Engine job %s: %w", ErrUsage, getenv("JOB_ID"), err)
	}
	a := &Allocation{Kind: BackendSGE, JobID: getenv("JOB_ID"), Hosts: hosts,
		Why: fmt.Sprintf("%s: PE_HOSTFILE=%s", why, path)}
	return a, a.launchWith(getenv, LauncherQrsh, true, asked)
}

func lsfAllocation(getenv func(string) string, why, asked string) (*Allocation, error) {
	a := &Allocation{Kind: BackendLSF, JobID: getenv("LSB_JOBID")}
	var err error
	if path := getenv("LSB_DJOB_HOSTFILE"); path != "" {
		a.Hosts, err = hostfile.ParsePBSNodefile(path) // one line per slot, as PBS's
		a.Why = fmt.Sprintf("%s: LSB_DJOB_HOSTFILE=%s", why, path)
	} else {
		a.Hosts, err = hostfile.FromLSFHosts(getenv("LSB_MCPU_HOSTS"))
		a.Why = fmt.Sprintf("%s: LSB_MCPU_HOSTS=%s", why, getenv("LSB_MCPU_HOSTS"))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: LSF job %s: %w", ErrUsage, a.JobID, err)
	}
	return a, a.launchWith(getenv, LauncherBlaunch, asked == LauncherBlaunch, asked)
}

// Name is how messages name the allocation: "Slurm job 42".
func (a *Allocation) Name() string {
	kind := map[string]string{BackendSlurm: "Slurm", BackendPBS: "PBS", BackendSGE: "Grid Engine", BackendLSF: "LSF", BackendFlux: "Flux"}[a.Kind]
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

// fluxAllocation reads a Flux instance's hosts, in broker rank order
// (flux getattr hostlist), and its cores per host (flux resource list):
// the instance that flux alloc or flux batch made for the job.
func fluxAllocation(getenv func(string) string, why, asked string) (*Allocation, error) {
	a := &Allocation{Kind: BackendFlux, JobID: getenv("FLUX_JOB_ID")}
	if err := a.launchWith(getenv, LauncherFlux, true, asked); err != nil {
		return nil, err
	}
	flux := func(args ...string) (string, error) {
		out, err := exec.Command(a.LauncherPath, args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && len(ee.Stderr) > 0 {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("%w: Flux job %s: flux %s: %w", ErrUsage, a.JobID, strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	list, err := flux("getattr", "hostlist")
	if err != nil {
		return nil, err
	}
	names, err := hostfile.ExpandNodelist(list)
	if err != nil {
		return nil, fmt.Errorf("%w: Flux job %s: flux getattr hostlist: %w", ErrUsage, a.JobID, err)
	}
	counts, err := flux("resource", "list", "--states=all", "--no-header", "--format={nnodes} {ncores}")
	if err != nil {
		return nil, err
	}
	var nodes, cores int
	if _, err := fmt.Sscan(counts, &nodes, &cores); err != nil || nodes <= 0 || cores < nodes {
		return nil, fmt.Errorf("%w: Flux job %s: flux resource list printed %q, want nodes and cores", ErrUsage, a.JobID, counts)
	}
	for _, n := range names {
		a.Hosts = append(a.Hosts, hostfile.Host{Name: n, Slots: cores / nodes})
	}
	a.Why = fmt.Sprintf("%s: flux getattr hostlist: %s, %d cores on %d nodes", why, list, cores, nodes)
	return a, nil
}

// Rank is host's place in the allocation's hosts (Flux's broker rank):
// -1 when it is none of them.
func (a *Allocation) Rank(host string) int {
	for i, h := range a.Hosts {
		if h.Name == host {
			return i
		}
	}
	return -1
}
