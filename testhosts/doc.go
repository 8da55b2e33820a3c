// Package testhosts stands up a fake cluster of N SSH hosts on this one
// machine, for gorun's SSH tests and benchmarks. It needs root and Linux, and
// runs the usual system tools: ip (iproute2), unshare, nsenter and mount
// (util-linux), ssh-keygen and ssh (openssh-client), and /usr/sbin/sshd
// (openssh-server).
//
// Each host hN (N from 1) is a network namespace joined by a veth pair (eth0
// on the namespace side) to a Linux bridge in the root namespace, with its own
// IPv4 address in a private /24 that exists only on the bridge and in the
// namespaces; the head (the root namespace, where the test runs) has .254 on
// the bridge. Inside each namespace a real OpenSSH sshd, with its own ed25519
// host key, runs under `unshare --uts --mount --propagation private`: hostname
// prints hN, /run, /tmp and /dev/shm are private tmpfs (node-local, as on a
// real cluster), and the rest of the file system is shared (as an NFS home is).
// /etc/hosts inside is a generated file listing the cluster and the head, and
// root's ~/.bashrc and ~/.profile are replaced by an empty file unless
// Options.KeepRealRC is set. The fixture's state directory stays visible at its
// own path inside the hosts.
//
// The client side is a generated key, an ssh config (Cluster.SSHConfig), a
// known_hosts file with every host key under the host's name and address, an
// `ssh` wrapper for launchers that want an executable (MPICH hydra's
// -launcher-exec) and an Open MPI hostfile.
//
// Start is the entry point for tests: it brings a cluster up and tears it down
// in t.Cleanup. The command testhosts/cmd/testhosts does the same for shell
// scripts (up N, down, status, exec hN CMD..., head CMD..., env).
//
// # Safety rules
//
// Traffic must never leave the machine, and the fixture must never disturb
// anything it did not create:
//
//   - A test host's name never reaches DNS: the ssh config addresses every host
//     by IP (HostName), and tools that resolve names themselves (Open MPI's
//     mpirun) are run through Cluster.HeadCommand, which gives them a private
//     /etc/hosts (a bind mount in a new mount namespace) listing hN -> IP.
//   - While a cluster is up, `ip route add unreachable <subnet>/24 metric 9999`
//     is in the root namespace, so that if the bridge goes away a test address
//     fails locally instead of leaving by the default route.
//   - Every namespace, link and route is named from a per-fixture id derived
//     from the pid (namespaces gt<id>hN, bridge gtb<id>, veths gtv<id>_N), and
//     the /24 is picked, under a machine-wide lock, among 10.213.X.0/24 that no
//     address or route on the machine overlaps; so two fixtures (two test
//     binaries run in parallel by go test ./...) never collide. Down touches
//     only the names of its own id.
//   - Down kills every process in each of its namespaces (the pids `ip netns
//     pids` would list), deletes the namespaces, veths, bridge, the unreachable
//     route and the state directory. Start calls it in t.Cleanup, so it runs
//     when a test fails too.
//
// Namespaces share the kernel, the pid space and IPC: anything that detects
// "same machine" (shared memory transports such as UCX) will see all the hosts
// as one machine, and tests meant to cross the network must say so.
package testhosts
