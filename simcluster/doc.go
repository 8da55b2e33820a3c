// Package simcluster is a simulated cluster for gorun's head: N hosts (up
// to 4,096 and more) in one process, for tests and for bench/scale.sh.
//
// What is real: the head (launcher.Run, unchanged: its plan, its launch
// tree, its events and summary, its rendezvous store), and on every host
// gorun's agent code (launcher.RunAgent: the control protocol, the
// launch and each rank's environment, the PMI-1 and KV servers, output
// relay, heartbeats, fences, the launch tree's relays and fence
// aggregation, failure and teardown). Each simulated rank speaks PMI-1's
// wire protocol to its agent's real PMI server, as an MPICH rank does on
// PMI_FD.
//
// What is simulated: the network, the hosts and the ranks. Each link (the
// head's to an agent it starts, an agent's to a lower agent) is an
// in-memory pipe that delivers bytes after a one-way latency and no faster
// than a bandwidth (Link); in gorun-sim the head's links cross a Unix
// socket into the cluster's process first. A host is an agent running in
// the cluster's process with launcher.Procs: its ranks are goroutines
// (no fork, no exec, no reaping, no /proc or /dev/shm sweeps), and a rank
// "exits" when its script says so or a signal ends it. A crash (Crash)
// cuts a host's links and ends its agent without a word. Config.Real
// runs chosen hosts' agents as real `gorun agent` processes, whose ranks
// are real processes, for a sample of the real fork path.
//
// What this means for the figures: every host's agent shares the one
// machine's cores, so work that real hosts do side by side (decoding a
// fence's answer, say) is done one after another here, and a figure
// that such work dominates is an upper bound; the head's own figures (its
// CPU time and peak memory in gorun-sim, which gives it a process of its
// own) are what the head would spend at that size.
package simcluster
