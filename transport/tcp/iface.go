package tcp

import (
	"fmt"
	"net"
	"strings"
)

// netIface is what interface selection needs to know about an interface.
type netIface struct {
	name     string
	up       bool
	loopback bool
	addrs    []net.IP
}

// systemIfaces lists this host's interfaces.
func systemIfaces() ([]netIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]netIface, 0, len(ifs))
	for _, fi := range ifs {
		ni := netIface{name: fi.Name, up: fi.Flags&net.FlagUp != 0, loopback: fi.Flags&net.FlagLoopback != 0}
		addrs, err := fi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ni.addrs = append(ni.addrs, ipn.IP)
			}
		}
		out = append(out, ni)
	}
	return out, nil
}

// pickAddr chooses the interface and address to listen on. spec is a
// comma-separated list of interface name prefixes, as NCCL_SOCKET_IFNAME:
// "=" before the list makes the names exact, "^" makes it a list to
// exclude. The empty spec means every interface but loopback and docker
// bridges, falling back to loopback when no other has an address. Among
// the matching interfaces (in system order) the first usable address wins,
// IPv4 before IPv6; link-local IPv6 addresses are never used.
func pickAddr(spec string, ifs []netIface) (string, net.IP, error) {
	exclude, exact := false, false
	list := spec
	if spec == "" {
		exclude, list = true, "lo,docker"
	}
	if strings.HasPrefix(list, "^") {
		exclude, list = true, list[1:]
	}
	if strings.HasPrefix(list, "=") {
		exact, list = true, list[1:]
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 && !exclude {
		return "", nil, fmt.Errorf("tcp: interface list %q names no interface", spec)
	}
	matches := func(name string) bool {
		for _, n := range names {
			if name == n || !exact && strings.HasPrefix(name, n) {
				return true
			}
		}
		return false
	}
	for _, v6 := range []bool{false, true} {
		for _, fi := range ifs {
			if !fi.up || matches(fi.name) == exclude {
				continue
			}
			if ip := usableAddr(fi.addrs, v6); ip != nil {
				return fi.name, ip, nil
			}
		}
	}
	if spec == "" {
		for _, v6 := range []bool{false, true} {
			for _, fi := range ifs {
				if fi.up && fi.loopback {
					if ip := usableAddr(fi.addrs, v6); ip != nil {
						return fi.name, ip, nil
					}
				}
			}
		}
	}
	var have []string
	for _, fi := range ifs {
		if fi.up && len(fi.addrs) > 0 {
			have = append(have, fi.name)
		}
	}
	return "", nil, fmt.Errorf("tcp: no interface matching %q has an address (interfaces up with addresses: %s)", spec, strings.Join(have, ", "))
}

func usableAddr(addrs []net.IP, v6 bool) net.IP {
	for _, ip := range addrs {
		if (ip.To4() == nil) != v6 || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		return ip
	}
	return nil
}
