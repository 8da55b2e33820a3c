package slurmtest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// makeDirs makes the state directory's tree.
func (c *Cluster) makeDirs(nodes int) error {
	dirs := []string{"etc", "munge", "state", "log", "dev", "jobs", "spool"}
	for i := 1; i <= nodes; i++ {
		dirs = append(dirs, filepath.Join("spool", fmt.Sprintf("node%02d", i)))
	}
	for _, d := range dirs {
		// 0755: munged wants its socket's directory searchable by all.
		if err := os.Mkdir(filepath.Join(c.Dir, d), 0o755); err != nil {
			return fmt.Errorf("slurmtest: %w", err)
		}
	}
	return nil
}

// writeFiles writes the munge key, slurm.conf, gres.conf and the fake GPU
// devices.
func (c *Cluster) writeFiles(extra string) error {
	// A munge key is random bytes (mungekey writes 1024 of them).
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("slurmtest: munge key: %w", err)
	}
	if err := os.WriteFile(c.MungeKey, key, 0o400); err != nil {
		return fmt.Errorf("slurmtest: %w", err)
	}
	gres := ""
	if c.GPUs > 0 {
		// gres/gpu wants File= paths that stat() as character devices;
		// symlinks to /dev/null pass, and the number ending each name is
		// the GPU's index.
		for g := range c.GPUs {
			if err := os.Symlink("/dev/null", filepath.Join(c.Dir, "dev", "gpu"+strconv.Itoa(g))); err != nil {
				return fmt.Errorf("slurmtest: %w", err)
			}
		}
		gres = fmt.Sprintf("AutoDetect=off\nNodeName=%s Name=gpu File=%s/dev/gpu[0-%d]\n", c.NodeList(), c.Dir, c.GPUs-1)
	}
	if err := os.WriteFile(c.GresConf, []byte(gres), 0o644); err != nil {
		return fmt.Errorf("slurmtest: %w", err)
	}
	if err := os.WriteFile(c.Conf, []byte(c.slurmConf(extra)), 0o644); err != nil {
		return fmt.Errorf("slurmtest: %w", err)
	}
	return nil
}

// slurmConf returns slurm.conf, with the reason for each setting that is not
// Slurm's default in a comment.
func (c *Cluster) slurmConf(extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# gorun slurmtest cluster in %[1]s
ClusterName=%[2]s
# The address in parentheses: no name is looked up. slurmctld accepts
# "localhost" as its host whatever this machine's name is.
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%[3]d
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[4]s
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool/%%n
SlurmctldPidFile=%[1]s/state/slurmctld.pid
SlurmdPidFile=%[1]s/spool/slurmd-%%n.pid
SlurmctldLogFile=%[1]s/log/slurmctld.log
SlurmdLogFile=%[1]s/log/slurmd-%%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No mail program is installed: "Configured MailProg is invalid" otherwise.
MailProg=/bin/true
# No cgroups: task/affinity cannot lay out more CPUs than the machine has.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# cons_tres: --gpus-per-node and --gpus-per-task. CR_CPU: memory is not
# tracked, so --mem never blocks a job.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Queued batch jobs start within about 1 s instead of 2 to 3 s.
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
# Nodes may advertise more CPUs than the machine has (else INVAL).
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
# sbatch --wait polls after 2 s and multiplies its sleep by 4 while it is
# below MinJobAge/2: 5 keeps it at 2 s. Finished jobs stay visible 5 to 65 s.
MinJobAge=5
`, c.Dir, ClusterName, c.ControllerPort, c.MungeSocket)
	gres := ""
	if c.GPUs > 0 {
		b.WriteString("GresTypes=gpu\n")
		gres = fmt.Sprintf(" Gres=gpu:%d", c.GPUs)
	}
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "NodeName=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=4000%s State=UNKNOWN\n", n.Name, n.Port, c.CPUs, gres)
	}
	fmt.Fprintf(&b, "PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n", Partition)
	if extra = strings.TrimSpace(extra); extra != "" {
		b.WriteString("# Options.Extra\n" + extra + "\n")
	}
	return b.String()
}

// lockPath is the machine-wide lock held from choosing a cluster's ports
// until its daemons listen on them.
func lockPath() string {
	for _, d := range []string{"/run/lock", "/run"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return filepath.Join(d, "gorun-slurmtest.lock")
		}
	}
	return filepath.Join(os.TempDir(), "gorun-slurmtest.lock")
}

// lockPorts takes the machine-wide port lock and returns its release, which
// may be called more than once.
func lockPorts() (func(), error) {
	f, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("slurmtest: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("slurmtest: lock %s: %w", f.Name(), err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

// portRange returns the range the ports are chosen in: below the kernel's
// ephemeral range (ip_local_port_range), from which outgoing connections and
// srun's and slurmstepd's listeners take theirs, else above it.
func portRange() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			z, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= z {
				elo, ehi = a, z
			}
		}
	}
	if elo-10000 >= 1000 {
		return 10000, elo - 1
	}
	return ehi + 1, 65535
}

// freePorts returns n distinct TCP ports that nothing listens on (IPv4 or
// IPv6), from a random place in portRange. The caller holds the port lock.
func freePorts(n int) ([]int, error) {
	lo, hi := portRange()
	span := hi - lo + 1
	if span < n {
		return nil, fmt.Errorf("slurmtest: no room for %d ports in %d-%d", n, lo, hi)
	}
	r, err := rand.Int(rand.Reader, big.NewInt(int64(span)))
	if err != nil {
		return nil, fmt.Errorf("slurmtest: %w", err)
	}
	start := int(r.Int64())
	var ports []int
	for k := 0; k < span && len(ports) < n; k++ {
		p := lo + (start+k)%span
		if portFree(p) {
			ports = append(ports, p)
		}
	}
	if len(ports) < n {
		return nil, errors.New("slurmtest: not enough free TCP ports in " + strconv.Itoa(lo) + "-" + strconv.Itoa(hi))
	}
	return ports, nil
}

// portFree reports whether TCP port p can be bound on every address, as the
// Slurm daemons bind it.
func portFree(p int) bool {
	l, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
