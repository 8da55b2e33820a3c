package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun/gorun/plugins/fabric/ofi"
	"github.com/gorun/gorun/plugins/sdk"
)

// providerPreference is the order in which the transport picks a provider
// when none is named: RDMA hardware first (AWS EFA, then InfiniBand/RoCE
// through verbs), then TCP, then shared memory (one host only).
var providerPreference = []string{"efa", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"}

// envProvider names the provider when gorun's --fabric-provider (the
// "provider" plugin option) is not given.
const envProvider = "GORUN_FABRIC_PROVIDER"

// choice is the provider and domain a transport uses, and why.
type choice struct {
	provider string
	domain   string // "" when the provider reported none
	why      string
}

// firstIface returns the first interface of gorun's --iface value: a
// leading "=" (exact match, as NCCL spells it) is dropped and only the
// first of a comma-separated list is kept.
func firstIface(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "=")
	if i := strings.IndexByte(s, ','); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// wantedProvider is the provider named by the plugin option or the
// environment, or "".
func wantedProvider(cfg sdk.Config) string {
	if p := strings.TrimSpace(cfg.Options["provider"]); p != "" {
		return p
	}
	return strings.TrimSpace(os.Getenv(envProvider))
}

// nicHints are the NICs gorun's binding chose for this rank: topology.Bind
// puts the NIC closest to the rank's GPU into the rank's environment as
// NCCL_IB_HCA==<ibdev>:1, UCX_NET_DEVICES=<ibdev>:1 or <netdev>, or
// NCCL_SOCKET_IFNAME==<netdev>, and the plugin inherits that environment.
func nicHints() []string {
	var out []string
	for _, v := range []string{"NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME"} {
		val := strings.TrimSpace(os.Getenv(v))
		if strings.HasPrefix(val, "^") { // an exclusion list names nothing to use
			continue
		}
		for _, s := range strings.Split(val, ",") {
			s = strings.TrimPrefix(strings.TrimSpace(s), "=")
			if i := strings.IndexByte(s, ':'); i >= 0 {
				s = s[:i]
			}
			if s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// domainNetdevs returns the network interfaces of a libfabric domain: the
// domain itself when it is a netdev (tcp, efa on some kernels), else the
// netdevs of the RDMA device of that name (verbs: mlx5_0 -> ib0, ens1f0).
func domainNetdevs(domain string) []string {
	if domain == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", domain)); err == nil {
		return []string{domain}
	}
	ents, err := os.ReadDir(filepath.Join("/sys/class/infiniband", domain, "device", "net"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// domainMatches reports whether domain is, or sits on, the device name.
func domainMatches(domain, name string) bool {
	if name == "" {
		return false
	}
	if domain == name {
		return true
	}
	for _, n := range domainNetdevs(domain) {
		if n == name {
			return true
		}
	}
	return false
}

// choose picks the provider and domain among infos (ofi.Providers("")).
//
// The provider is the "provider" option (gorun --fabric-provider), else
// $GORUN_FABRIC_PROVIDER, else the first of providerPreference that
// libfabric offers, else libfabric's first.
//
// Among several domains of that provider the transport prefers the NIC
// closest to the rank's GPU. It does not run topology discovery itself
// (sysfs walk plus NVML initialization in every rank's plugin is too heavy
// for a choice gorun has made already): gorun's launcher binds each rank
// with package topology and exports the NIC closest to the rank's GPU in
// NCCL_IB_HCA / UCX_NET_DEVICES / NCCL_SOCKET_IFNAME, which the plugin
// inherits. So the domain is, in this order: the one on the interface
// given with gorun --iface (cfg.Iface, first entry); the one on the NIC of
// those variables; the first one libfabric reports.
func choose(cfg sdk.Config, infos []ofi.Info) (choice, error) {
	want := wantedProvider(cfg)
	byProv := map[string][]string{} // provider -> domains, in libfabric's order
	var order []string
	for _, in := range infos {
		if _, ok := byProv[in.Provider]; !ok {
			order = append(order, in.Provider)
		}
		if !contains(byProv[in.Provider], in.Domain) {
			byProv[in.Provider] = append(byProv[in.Provider], in.Domain)
		}
	}
	var c choice
	switch {
	case want != "":
		if _, ok := byProv[want]; !ok {
			return c, fmt.Errorf("fabric: libfabric provider %q is not available here (found: %s)", want, strings.Join(order, ", "))
		}
		c.provider, c.why = want, "provider requested"
	default:
		for _, p := range providerPreference {
			if _, ok := byProv[p]; ok {
				c.provider, c.why = p, "preferred provider"
				break
			}
		}
		if c.provider == "" {
			if len(order) == 0 {
				return c, fmt.Errorf("fabric: libfabric offers no provider with reliable tagged messaging (FI_EP_RDM, FI_TAGGED)")
			}
			c.provider, c.why = order[0], "libfabric's first provider"
		}
	}
	doms := byProv[c.provider]
	if len(doms) == 0 {
		return c, nil
	}
	c.domain = doms[0]
	if len(doms) == 1 {
		return c, nil
	}
	iface := firstIface(cfg.Iface)
	if iface == "" && strings.HasPrefix(c.provider, "tcp") {
		iface = firstIface(os.Getenv("FI_TCP_IFACE"))
	}
	for _, d := range doms {
		if domainMatches(d, iface) {
			c.domain, c.why = d, c.why+", domain on --iface "+iface
			return c, nil
		}
	}
	for _, h := range nicHints() {
		for _, d := range doms {
			if domainMatches(d, h) {
				c.domain, c.why = d, c.why+", domain on the rank's NIC "+h
				return c, nil
			}
		}
	}
	c.why += ", first domain"
	return c, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sysfsDevice fills in a Device's PCI address, NUMA node and speed from
// sysfs, when its domain is a netdev or an RDMA device.
func sysfsDevice(d *sdk.Device) {
	d.NUMA = -1
	var dev string
	if _, err := os.Stat(filepath.Join("/sys/class/net", d.Name, "device")); err == nil {
		dev = filepath.Join("/sys/class/net", d.Name, "device")
		if b, err := os.ReadFile(filepath.Join("/sys/class/net", d.Name, "speed")); err == nil {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
				d.SpeedMbps = v
			}
		}
	} else if _, err := os.Stat(filepath.Join("/sys/class/infiniband", d.Name, "device")); err == nil {
		dev = filepath.Join("/sys/class/infiniband", d.Name, "device")
	}
	if dev == "" {
		return
	}
	if p, err := filepath.EvalSymlinks(dev); err == nil {
		d.PCI = filepath.Base(p)
	}
	if b, err := os.ReadFile(filepath.Join(dev, "numa_node")); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v >= 0 {
			d.NUMA = v
		}
	}
}
