// This file holds the parsers of the network and memory files a process
// reads about itself: /proc/net/route and /proc/self/status.

package procfs

import (
	"os"
	"strconv"
	"strings"
)

// ParseDefaultRoute returns the interface of the IPv4 default route in a
// /proc/net/route file (destination and mask 0, flag RTF_UP set), "" when
// there is none.
func ParseDefaultRoute(b []byte) string {
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			if flags, err := strconv.ParseUint(f[3], 16, 32); err == nil && flags&1 != 0 {
				return f[0]
			}
		}
	}
	return ""
}

// DefaultRouteIface returns the interface of this network namespace's IPv4
// default route (see [ParseDefaultRoute]); "" when there is none or the
// file cannot be read.
func (fs FS) DefaultRouteIface() string {
	b, err := os.ReadFile(fs.path("net", "route"))
	if err != nil {
		return ""
	}
	return ParseDefaultRoute(b)
}

// ParseStatusKB returns the field key of a /proc/PID/status file
// ("VmHWM": the peak resident set) in KiB; 0 when it has no such field.
func ParseStatusKB(b []byte, key string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(ParseStatus(b, key), " kB"), 10, 64)
	return n
}

// SelfStatusKB returns the field key of this process's status (see
// [ParseStatusKB]); 0 when it cannot be read.
func (fs FS) SelfStatusKB(key string) int64 { return fs.statusKB("self", key) }

// StatusKB returns the field key of process pid's status (see
// [ParseStatusKB]); 0 when it cannot be read.
func (fs FS) StatusKB(pid int, key string) int64 { return fs.statusKB(pidDir(pid), key) }

func (fs FS) statusKB(dir, key string) int64 {
	b, err := os.ReadFile(fs.path(dir, "status"))
	if err != nil {
		return 0
	}
	return ParseStatusKB(b, key)
}
