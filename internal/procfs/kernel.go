// This file holds the parsers of the kernel-wide files: /proc/vmstat and
// /proc/sys/net/ipv4/ip_local_port_range.

package procfs

import (
	"os"
	"strconv"
	"strings"
)

// ParseVMStat returns the counter named key in a /proc/vmstat file ("name
// value" lines); 0 when the file has no such counter.
func ParseVMStat(b []byte, key string) int {
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), key+" "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// VMStat returns the kernel's counter named key in /proc/vmstat
// ("oom_kill": the processes the OOM killer has killed since boot); 0 when
// it cannot be read.
func (fs FS) VMStat(key string) int {
	b, err := os.ReadFile(fs.path("vmstat"))
	if err != nil {
		return 0
	}
	return ParseVMStat(b, key)
}

// ParsePortRange parses ip_local_port_range: the first and last port of
// the kernel's ephemeral range, which it gives to outgoing connections. ok
// is false when b is not two numbers.
func ParsePortRange(b []byte) (lo, hi int, ok bool) {
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return lo, hi, true
}

// PortRange reads the kernel's ephemeral port range (see
// [ParsePortRange]); ok is false when it cannot be read.
func (fs FS) PortRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile(fs.path("sys", "net", "ipv4", "ip_local_port_range"))
	if err != nil {
		return 0, 0, false
	}
	return ParsePortRange(b)
}
