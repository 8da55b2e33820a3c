// This file holds the parsers of the network and memory files a process
// reads about itself: /proc/net/route, /proc/net/tcp and tcp6, and
// /proc/self/status.

package procfs

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
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

// Socket is one row of /proc/net/tcp or /proc/net/tcp6: a TCP socket of
// the reader's network namespace.
type Socket struct {
	Local, Remote netip.AddrPort // IPv4 ones from tcp, IPv6 (v4-mapped included) from tcp6
	State         int            // the kernel's TCP state (TCPListen, ...)
	UID           int            // the user the socket belongs to (who made it), in the reader's user namespace
	Inode         uint64         // its inode, as /proc/PID/fd shows it; 0 when no process holds it (TIME_WAIT)
}

// TCPListen is the State of a listening socket.
const TCPListen = 0x0A

// ParseNetTCP parses a /proc/net/tcp or /proc/net/tcp6 file: a heading,
// then one socket a line ("sl local rem st tx:rx tr:when retrnsmt uid
// timeout inode ..."), addresses as the kernel prints them, hexadecimal
// 32-bit words in the machine's byte order. A line it cannot read is an
// error wrapping ErrFormat.
func ParseNetTCP(b []byte) ([]Socket, error) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var out []Socket
	for n, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			return nil, fmt.Errorf("%w: /proc/net/tcp line %d: %d fields", ErrFormat, n+2, len(f))
		}
		var s Socket
		var err error
		if s.Local, err = parseSockAddr(f[1]); err == nil {
			s.Remote, err = parseSockAddr(f[2])
		}
		if err != nil {
			return nil, fmt.Errorf("%w: /proc/net/tcp line %d: %v", ErrFormat, n+2, err)
		}
		st, err1 := strconv.ParseUint(f[3], 16, 8)
		uid, err2 := strconv.Atoi(f[7])
		inode, err3 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%w: /proc/net/tcp line %d: state %q, uid %q, inode %q", ErrFormat, n+2, f[3], f[7], f[9])
		}
		s.State, s.UID, s.Inode = int(st), uid, inode
		out = append(out, s)
	}
	return out, nil
}

// parseSockAddr reads ADDR:PORT as /proc/net/tcp prints them: ADDR is 8
// or 32 hexadecimal digits, each 8 of them a 32-bit word in the machine's
// byte order, and PORT 4.
func parseSockAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	raw, err2 := hex.DecodeString(a)
	if !ok || err != nil || err2 != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for w := 0; w < len(raw); w += 4 {
		binary.NativeEndian.PutUint32(raw[w:], binary.BigEndian.Uint32(raw[w:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// TCPSockets returns the TCP sockets of this network namespace, IPv4's
// (/proc/net/tcp) then IPv6's (/proc/net/tcp6, which a kernel without
// IPv6 lacks: then none). Like any reading of /proc it is a snapshot.
func (fs FS) TCPSockets() ([]Socket, error) {
	var out []Socket
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fs.path("net", name))
		if os.IsNotExist(err) && name == "tcp6" {
			break
		}
		if err != nil {
			return nil, err
		}
		socks, err := ParseNetTCP(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fs.path("net", name), err)
		}
		out = append(out, socks...)
	}
	return out, nil
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
