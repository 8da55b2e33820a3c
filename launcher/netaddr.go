// This file holds the network addresses that the agent tells the head of
// (the local address routed to the peers, a free port for MASTER_PORT, the
// addresses of an SSH connection), and the one the head listens on for the
// agents that srun starts.

package launcher

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/gorun/gorun/internal/procfs"
)

// sshAddr returns field i of an SSH_CONNECTION value ("client_ip
// client_port server_ip server_port").
func sshAddr(v string, i int) string {
	f := strings.Fields(v)
	if len(f) != 4 {
		return ""
	}
	return f[i]
}

// routeAddr returns the local address the kernel would use to reach the
// peers (a UDP "connect" sends nothing), or iface's first IPv4 address.
// Peers that disagree are resolved by majority.
func routeAddr(peers []string, iface string) (string, error) {
	if iface != "" {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return "", fmt.Errorf("--iface %s: %w", iface, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("--iface %s: %w", iface, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), nil
			}
		}
		return "", fmt.Errorf("--iface %s has no IPv4 address", iface)
	}
	votes := map[string]int{}
	best := ""
	var firstErr error
	for _, p := range peers {
		c, err := net.Dial("udp", net.JoinHostPort(p, "9"))
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("no route to %s: %w", p, err)
			}
			continue
		}
		ip := c.LocalAddr().(*net.UDPAddr).IP.String()
		c.Close()
		votes[ip]++
		if votes[ip] > votes[best] {
			best = ip
		}
	}
	if best == "" {
		if firstErr == nil {
			firstErr = errors.New("no peers to route to")
		}
		return "", firstErr
	}
	return best, nil
}

// listenAddr is the address the head listens on for its agents: iface's
// first IPv4 address, else that of the interface of this node's default
// route, else the first IPv4 address of an interface that is up and not
// loopback. Never every interface, and never loopback: an agent runs on
// another node.
func listenAddr(iface string) (string, error) {
	if iface != "" {
		return routeAddr(nil, iface)
	}
	if name := procfs.Proc.DefaultRouteIface(); name != "" {
		if ip, err := routeAddr(nil, name); err == nil {
			return ip, nil
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if ip, err := routeAddr(nil, ifc.Name); err == nil {
			return ip, nil
		}
	}
	return "", errors.New("this node has no IPv4 address but loopback's, which agents on other nodes cannot reach; name an interface with --iface")
}
