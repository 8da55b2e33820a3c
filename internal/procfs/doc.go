// Package procfs reads the Linux /proc files that gorun's agent and its
// tests look at: a process's stat line, its children, its file mappings and
// open descriptors, its threads, executable, wait channel, system call and
// status fields (for package stacks), the kernel's OOM-kill count, its
// ephemeral port range and Yama's ptrace scope, and the network
// namespace's default route and TCP sockets (who holds a port).
//
// Each file has one parser that takes the file's bytes ([ParseStat],
// [ParseMaps], [ParseSyscall], [ParseStatus], [ParseVMStat],
// [ParsePortRange], [ParseNetTCP]), table-tested on files captured from real machines
// under testdata, and a reader on [FS] that finds and reads the file. The readers are quiet where a process is gone
// or may not be read: a process can end between listing /proc and reading
// its files, and callers sweep over many of them.
//
// procfs reads; it signals, waits for and changes nothing. It knows only
// the files gorun needs, not all of /proc (github.com/prometheus/procfs
// does that).
package procfs
