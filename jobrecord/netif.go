package jobrecord

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Iface is one network interface of a host, as /sys/class/net tells it.
type Iface struct {
	Name string `json:"name"`
	// MTU is the interface's MTU, bytes; 0 where it could not be read.
	MTU int `json:"mtu,omitempty"`
	// SpeedMbps is the link's speed, Mb/s; 0 where the kernel does not
	// tell it (a link that is down, most virtual interfaces).
	SpeedMbps int `json:"speed_mbps,omitempty"`
	// State is the interface's operstate: up, down, dormant,
	// lowerlayerdown, unknown (what a loopback-like or tunnel interface
	// says), or "" where it could not be read.
	State string `json:"state,omitempty"`
}

// virtualIfacePrefixes start the names of interfaces that come and go
// with containers, virtual machines, VPN sessions and traffic shaping,
// and so differ between hosts by nature: Docker's (docker0, br-1a2b3c,
// veth0a1b2c), libvirt's (virbr0, vnet3), Kubernetes' CNIs' (cni0,
// flannel.1, cali12ab, cilium_host, lxc12ab, kube-ipvs0, weave,
// vxlan.calico), tunnels (tun0, tap0), tc's ifb0 and dummy0. [Gather]
// does not record them, and [FindSkew] does not compare them.
var virtualIfacePrefixes = []string{
	"veth", "docker", "br-", "virbr", "vnet", "cni", "flannel", "cali", "cilium",
	"lxc", "kube-", "weave", "vxlan", "tun", "tap", "ifb", "dummy",
}

// virtualIface reports whether the interface name is the loopback or
// one of virtualIfacePrefixes'.
func virtualIface(name string) bool {
	if name == "lo" {
		return true
	}
	for _, p := range virtualIfacePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// interfaces reads the network interfaces under root's sys/class/net,
// by name, leaving out the loopback and the virtual ones (see
// virtualIface): a few small files each. It returns nil where there is
// no sys/class/net.
func interfaces(root string) []Iface {
	dir := filepath.Join(root, "sys/class/net")
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil
	}
	read := func(name, file string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name, file))
		return strings.TrimSpace(string(b))
	}
	ifs := []Iface{}
	for _, e := range entries {
		name := e.Name()
		if virtualIface(name) {
			continue
		}
		mtu, _ := strconv.Atoi(read(name, "mtu"))
		// speed is -1, or cannot be read (EINVAL), when the link is
		// down or the driver does not know.
		speed, _ := strconv.Atoi(read(name, "speed"))
		ifs = append(ifs, Iface{Name: name, MTU: mtu, SpeedMbps: max(speed, 0), State: read(name, "operstate")})
	}
	return ifs
}
