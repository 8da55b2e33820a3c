// Package gridenginetest stands up a real, throwaway Grid Engine cluster on
// this one machine, for gorun's tests of running under Grid Engine (qsub
// with a parallel environment, $PE_HOSTFILE, `qrsh -inherit` tight
// integration, qdel). It needs root and Linux, and runs Debian 12's Son of
// Grid Engine 8.1.9: sge_qmaster (gridengine-master), sge_execd and
// sge_shepherd (gridengine-exec), and the clients qsub, qrsh, qstat, qdel,
// qconf and qhost (gridengine-client). scripts/test-deps.sh installs them.
//
// # Hosts
//
// A cluster is one sge_qmaster on the host "qmaster" and one sge_execd on
// each exec host node01..nodeNN. Every host is a network, UTS and mount
// namespace of its own, created by this package (never named, so nothing is
// mounted under /run/netns): `hostname` prints the host's name, and
// /etc/hosts and /etc/nsswitch.conf inside are bind mounts of files in the
// state directory, made only in the host's private mount namespace. The
// hosts file lists qmaster and the nodes, and nsswitch.conf says "hosts:
// files": Grid Engine resolves every name and address it meets (forwards and
// backwards: the qmaster names a client by its source address) from that
// file, and no look-up inside the cluster ever reaches DNS. This machine's
// own /etc is neither read for host names nor changed.
//
// The hosts are joined by a private IPv4 /24, 10.215.X.0/24: the qmaster's
// namespace holds a Linux bridge with the address .1, and each node a veth
// (eth0, .11, .12, ...) whose other end is on that bridge. The root network
// namespace gets no link and no address; while the cluster is up it holds
// only `unreachable 10.215.X.0/24 metric 9999`, so that a process outside
// the cluster that tries a test address fails here instead of leaving by the
// default route. Creating that route is also how a cluster claims X: a
// second cluster (another test binary) gets EEXIST and takes the next X, and
// X is skipped when any address or route of this machine overlaps it.
//
// Since every cluster has network namespaces of its own, its daemons use
// Grid Engine's usual ports (6444 for the qmaster, 6445 for the execds)
// without colliding with anything. The execds' additional group ids
// (gid_range, with which sge_execd finds and kills a job's processes,
// ENABLE_ADDGRP_KILL) are per node and derived from X, so that no two
// execds on this machine, of this cluster or another, share one: they share
// one pid space, and an execd would otherwise kill another job's processes.
//
// Clients run on the qmaster host (the one submit host): Cluster.Command
// runs a program there, and Cluster.Env puts a directory of wrappers first in
// PATH (qsub, qstat, qdel, ...) that enter the qmaster host's namespaces
// with nsenter, or run the client directly when already inside the cluster
// (in a job). Inside jobs the execd's PATH finds Debian's qrsh, which works
// as it is: `qrsh -inherit HOST CMD` needs only the job's own environment
// (SGE_ROOT, SGE_CELL, SGE_QMASTER_PORT, SGE_EXECD_PORT and JOB_ID). It
// forwards its stdin: in a loop that reads a file, give it </dev/null.
// The job script gets TMP but (in this build) no TMPDIR; the tasks that
// qrsh -inherit starts get both.
//
// Everything else lives under one state directory, which is SGE_ROOT, with
// SGE_CELL "default": the cell's bootstrap and configuration files, the
// qmaster's spool (classic flat-file spooling), each execd's spool, the
// queue's per-node TMPDIRs, the logs and the jobs' scripts and output files.
//
// # Configuration
//
// One cluster queue, all.q, has Options.Slots slots on every node and the
// parallel environment "gorun" (allocation_rule $round_robin, control_slaves
// TRUE, job_is_first_task FALSE): `qsub -pe gorun 4` on two nodes gets two
// slots on each, $PE_HOSTFILE lists "node01 2 all.q@node01 UNDEFINED" and
// "node02 2 all.q@node02 UNDEFINED", and the job script runs on the first
// node. The scheduler runs every second (a job starts about 1 s after qsub;
// `qsub -sync y` of a two-node job takes about 3 s). Jobs run as root
// (min_uid 0), with shell_start_mode unix_behavior (a script's #! line
// counts), without load thresholds (another process's load never holds a
// job back), and no mail is sent.
//
// Start is the entry point for tests: it brings a cluster up and tears it
// down in t.Cleanup, and skips the test (fails it when the CI environment
// variable is set) on a machine that cannot run one. QsubSync runs `qsub
// -sync y` of a script and returns the job's exit code and output, RunPE does
// so with `-pe gorun N`, and JobProcesses finds a job's processes left on the
// nodes. The command gridenginetest/cmd/gridenginetest does the same for
// shell scripts (up, down, status, env).
//
// # Teardown
//
// Down kills (SIGKILL) every process in the cluster's network namespaces
// (the daemons, the shepherds, the jobs' processes, those started by `qrsh
// -inherit`, and the processes that hold the namespaces) until none is left;
// the namespaces, their mounts, the veths and the bridge go with the last of
// them. It then deletes the unreachable route, checks that nothing is
// mounted under the state directory and removes it. A namespace's inode is
// trusted only while this process holds it open (the process that ran Up), or
// while a process in it is one of the cluster's recorded processes or carries
// the cluster's marker (GORUN_GRIDENGINETEST) in its environment, because
// the kernel reuses the inodes of dead namespaces.
//
// # What it does not do
//
// The hosts share this machine's file system (/tmp included), pid space and
// IPC: anything that detects "same machine" (shared memory transports) sees
// one machine. There is no shadow master, no accounting database beyond
// the accounting file in the cell, no cgroups, and no user but root.
package gridenginetest
