// Package slurmtest stands up a real, throwaway, multi-node Slurm cluster on
// this one machine, for gorun's tests of running under Slurm (sbatch, srun,
// the SLURM_* environment, GPUs through gres, scancel). It needs root and
// Linux, and runs Debian 12's packages: munged (munge), slurmctld (slurmctld),
// slurmd (slurmd) and the clients sbatch, srun, squeue, scancel, scontrol and
// sinfo (slurm-client). scripts/test-deps.sh installs them.
//
// A cluster is one munged with its own key and socket, one slurmctld, and one
// `slurmd -N nodeNN` per node (Debian's slurmd is built with multiple-slurmd
// support). Each slurmd runs in its own UTS namespace whose hostname is the
// node's name, so `hostname` in a task prints node01, node02, ...; munged and
// slurmctld run in UTS namespaces of their own too (with this machine's name),
// so that every process of the cluster, down to the tasks of its jobs, can be
// found by namespace. Everything lives under one state directory: slurm.conf,
// gres.conf, the munge key and socket, the controller's state, each node's
// spool, the logs and the jobs' output files. Nothing in /etc is read or
// changed, and nothing is mounted.
//
// All daemons talk over 127.0.0.1 (loopback mode): slurm.conf names the
// controller as localhost(127.0.0.1) and every node with NodeAddr=127.0.0.1
// and a port of its own, so no node name is ever looked up. The ports are
// chosen free when Up starts, below the kernel's ephemeral port range (where
// srun's and slurmstepd's own listeners and outgoing connections never land),
// under a machine-wide lock held until every daemon listens: clusters started
// at once by parallel test binaries never collide.
//
// Fake GPUs are gres/gpu entries whose File= paths are symlinks to /dev/null
// in the state directory (gres needs character devices; the number at the end
// of each name is the GPU's index). A job that asks for --gpus-per-node=2 gets
// SLURM_JOB_GPUS and CUDA_VISIBLE_DEVICES such as 0,1.
//
// Start is the entry point for tests: it brings a cluster up and tears it
// down in t.Cleanup, and skips the test (fails it when the CI environment
// variable is set) on a machine that cannot run one. Cluster.Env gives the
// environment a client needs (SLURM_CONF), Cluster.Command runs a client with
// it, and SbatchWait runs `sbatch --wait` of a script and returns the job's
// exit code and output. The command slurmtest/cmd/slurmtest does the same for
// shell scripts (up, down, status, env).
//
// # What it does not do
//
// The nodes share this machine's network namespace, file system (/tmp
// included) and pid space: two tasks on different nodes that bind the same
// fixed port, or write the same fixed path, collide (`srun --mpi=pmix` fails
// for that reason; pmi2 works). Node names do not resolve. Nothing uses
// cgroups (proctrack/linuxproc, task/none), so GPUs and CPUs are not
// constrained, and a node may advertise more CPUs than the machine has.
// Accounting (sacct) is not configured. Finished jobs stay visible to
// scontrol for only 5 to 65 seconds (MinJobAge=5, which keeps `sbatch --wait`
// polling every 2 s).
//
// # Teardown
//
// Down kills (SIGKILL) every process of the cluster: the daemons by pid, and
// every process in the cluster's UTS namespaces (slurmstepd's and the tasks
// of running jobs), until none is left; it then checks that nothing is
// mounted under the state directory and removes it. Namespaces are matched by
// inode, and an inode is only trusted while this process holds the namespace
// open (the process that ran Up) or while a process in it carries the
// cluster's marker in its environment (the daemons' GORUN_SLURMTEST, or the
// SLURM_CONF that slurmd gives steps and tasks), because the kernel reuses
// the inodes of dead namespaces.
package slurmtest
