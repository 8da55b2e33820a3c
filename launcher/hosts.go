package launcher

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/topology"
)

// HostSource is what the user said about hosts.
type HostSource struct {
	Hostfile string   // --hostfile
	HostList []string // -H, each a comma-separated list
	Include  string   // DeepSpeed --include
	Exclude  string   // DeepSpeed --exclude
	NoLocal  bool     // --nolocal: leave out the hosts that are this machine
	// Alloc is the resource manager's allocation gorun runs in (see
	// DetectAllocation): its hosts are the default, and a hostfile or -H
	// may only choose among them.
	Alloc *Allocation
}

// Hosts turns a host source into hosts. With no source it returns this
// machine as "localhost", one slot per GPU or else per core, and implicit
// set. desc names the source for messages.
func (s HostSource) Hosts() (hosts []hostfile.Host, implicit bool, desc string, err error) {
	switch {
	case s.Hostfile != "" && len(s.HostList) > 0:
		return nil, false, "", fmt.Errorf("%w: give --hostfile or -H, not both", ErrUsage)
	case s.Hostfile != "":
		desc = "--hostfile " + s.Hostfile
		hosts, err = hostfile.ParseFile(s.Hostfile)
	case len(s.HostList) > 0:
		desc = "-H " + strings.Join(s.HostList, ",")
		hosts, err = hostfile.ParseHostList(strings.Join(s.HostList, ","))
	case s.Alloc != nil:
		desc = s.Alloc.Name()
		hosts = append([]hostfile.Host(nil), s.Alloc.Hosts...)
	default:
		implicit, desc = true, "localhost"
		slots := topology.LocalGPUs()
		if slots == 0 {
			slots = runtime.NumCPU()
		}
		hosts = []hostfile.Host{{Name: "localhost", Slots: slots}}
	}
	if err != nil {
		return nil, false, "", fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if s.Alloc != nil && (s.Hostfile != "" || len(s.HostList) > 0) {
		if hosts, err = s.Alloc.Select(hosts, desc); err != nil {
			return nil, false, "", err
		}
		desc += " within " + s.Alloc.Name()
	}
	if s.Include != "" && s.Exclude != "" {
		return nil, false, "", fmt.Errorf("%w: give --include or --exclude, not both (as DeepSpeed)", ErrUsage)
	}
	for _, f := range []struct {
		flag, val string
		apply     func([]hostfile.Host, hostfile.Filter) ([]hostfile.Host, error)
	}{{"--include", s.Include, hostfile.Include}, {"--exclude", s.Exclude, hostfile.Exclude}} {
		if f.val == "" {
			continue
		}
		flt, err := hostfile.ParseFilter(f.val)
		if err == nil {
			hosts, err = f.apply(hosts, flt)
		}
		if err != nil {
			return nil, false, "", fmt.Errorf("%w: %s %q: %w", ErrUsage, f.flag, f.val, err)
		}
		desc += " " + f.flag + " " + f.val
		if len(hosts) == 0 {
			return nil, false, "", fmt.Errorf("%w: %s %q leaves no hosts", ErrUsage, f.flag, f.val)
		}
	}
	if s.NoLocal {
		if hosts, err = withoutLocal(hosts, desc); err != nil {
			return nil, false, "", err
		}
		desc += " --nolocal"
	}
	return hosts, implicit, desc, nil
}

// withoutLocal returns hosts without those that are this machine
// ([IsLocal]), as mpirun -nolocal runs no rank where it runs; none left is
// an error that names the hosts' source.
func withoutLocal(hosts []hostfile.Host, desc string) ([]hostfile.Host, error) {
	var out []hostfile.Host
	for _, h := range hosts {
		if !IsLocal(h.Name) {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --nolocal leaves no hosts: every host of %s is this machine; name other hosts with -H or --hostfile", ErrUsage, desc)
	}
	return out, nil
}

// IsLocal reports whether a host name means this machine: localhost, a
// loopback address, this machine's host name, or an address of one of its
// interfaces. It never asks DNS.
func IsLocal(name string) bool {
	if name == "localhost" || strings.HasPrefix(name, "localhost.") {
		return true
	}
	if ip := net.ParseIP(strings.Trim(name, "[]")); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	h, err := os.Hostname()
	if err != nil {
		return false
	}
	short, _, _ := strings.Cut(h, ".")
	return name == h || name == short
}

// ParseStdin parses --stdin: a rank number, or "none".
func ParseStdin(s string) (int, error) {
	if s == "none" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: --stdin %q: want a rank number or none", ErrUsage, s)
	}
	return n, nil
}
