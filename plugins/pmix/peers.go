//go:build cgo

package main

import (
	"os"
	"strconv"
	"strings"
)

// foreignClient reports whether a TCP connection to one of this process's
// listening sockets (libpmix's) comes from a socket of a user other than
// this process's, and that user. The kernel's socket tables say who
// opened each end of a loopback connection, which a client cannot forge.
func foreignClient() (uid int, found bool) {
	mine := map[string]bool{} // inodes of this process's sockets
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if in, ok := strings.CutPrefix(l, "socket:["); ok {
			mine[strings.TrimSuffix(in, "]")] = true
		}
	}
	var rows [][]string // sl local remote st tx:rx tr:tm retrnsmt uid timeout inode
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(l); len(f) > 9 {
				rows = append(rows, f)
			}
		}
	}
	// The address:port of this process's listeners, and *:port for those
	// on a wildcard address.
	listening := map[string]bool{}
	for _, f := range rows {
		if f[3] == "0A" && mine[f[9]] {
			listening[f[1]] = true
			if addr, port, _ := strings.Cut(f[1], ":"); strings.Trim(addr, "0") == "" {
				listening["*:"+port] = true
			}
		}
	}
	me := os.Getuid()
	for _, f := range rows {
		// A socket of a process (not TIME_WAIT's, which has none; in any
		// other state, half-closed ones included) connected to a listener
		// of ours.
		if f[3] == "0A" || f[9] == "0" || !listensOn(listening, f[2]) {
			continue
		}
		if u, err := strconv.Atoi(f[7]); err == nil && u != me {
			return u, true
		}
	}
	return 0, false
}

// listensOn reports whether remote (hex address:port as in /proc/net/tcp)
// is one of the listening addresses.
func listensOn(listening map[string]bool, remote string) bool {
	_, port, _ := strings.Cut(remote, ":")
	return listening[remote] || listening["*:"+port]
}
