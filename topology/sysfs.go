package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Sysfs paths, relative to the root of the file system ("/").
const (
	cpuDir     = "sys/devices/system/cpu"
	nodeDir    = "sys/devices/system/node"
	netDir     = "sys/class/net"
	ibDir      = "sys/class/infiniband"
	devicesDir = "sys/devices"
	// RecordedPathFile, in a fixture's sys/bus/pci/devices/<bdf>/ or
	// sys/class/net/<name>/ directory, holds the real sysfs path of the
	// device ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0") for
	// file systems that cannot hold symbolic links.
	RecordedPathFile = "gorun-sysfs-path"
)

// ReadSysfs builds a Node from the sysfs tree under root (an fs.FS of
// "/", such as os.DirFS("/") or a recorded machine): CPUs, packages,
// NUMA nodes, PCI devices with their paths, GPUs (from PCI class and
// vendor) and NICs. It does not use NVML.
func ReadSysfs(root fs.FS) (*Node, error) {
	n := &Node{PCI: map[string]*PCIDevice{}, GPUSource: "sysfs"}
	if err := readCPUs(root, n); err != nil {
		return nil, err
	}
	if err := readNUMA(root, n); err != nil {
		return nil, err
	}
	if err := readPCI(root, n); err != nil {
		return nil, err
	}
	n.GPUs = sysfsGPUs(n)
	if err := readNICs(root, n); err != nil {
		return nil, err
	}
	return n, nil
}

func readTrim(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func readInt(fsys fs.FS, name string) (int, error) {
	s, err := readTrim(fsys, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

func readCPUList(fsys fs.FS, name string) (CPUSet, error) {
	s, err := readTrim(fsys, name)
	if err != nil {
		return CPUSet{}, err
	}
	set, err := ParseCPUList(s)
	if err != nil {
		return CPUSet{}, fmt.Errorf("%s: %w", name, err)
	}
	return set, nil
}

func readCPUs(fsys fs.FS, n *Node) error {
	online, err := readCPUList(fsys, cpuDir+"/online")
	if err != nil {
		return fmt.Errorf("topology: online CPUs: %w", err)
	}
	type pkgCore struct{ pkg, core int }
	pkgs := map[int]*Package{}
	cores := map[pkgCore]bool{}
	for _, id := range online.CPUs() {
		dir := fmt.Sprintf("%s/cpu%d/topology", cpuDir, id)
		c := CPU{ID: id, NUMA: -1}
		if c.Core, err = readInt(fsys, dir+"/core_id"); err != nil {
			return fmt.Errorf("topology: CPU %d: %w", id, err)
		}
		if c.Package, err = readInt(fsys, dir+"/physical_package_id"); err != nil {
			return fmt.Errorf("topology: CPU %d: %w", id, err)
		}
		if c.Siblings, err = readCPUList(fsys, dir+"/thread_siblings_list"); err != nil {
			return fmt.Errorf("topology: CPU %d: %w", id, err)
		}
		n.CPUs = append(n.CPUs, c)
		p := pkgs[c.Package]
		if p == nil {
			p = &Package{ID: c.Package}
			pkgs[c.Package] = p
		}
		p.CPUs.Add(id)
		if k := (pkgCore{c.Package, c.Core}); !cores[k] {
			cores[k] = true
			p.Cores++
		}
	}
	for _, p := range pkgs {
		n.Packages = append(n.Packages, *p)
	}
	sort.Slice(n.Packages, func(i, j int) bool { return n.Packages[i].ID < n.Packages[j].ID })
	return nil
}

func readNUMA(fsys fs.FS, n *Node) error {
	ents, err := fs.ReadDir(fsys, nodeDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("topology: NUMA nodes: %w", err)
	}
	for _, e := range ents {
		id, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if !strings.HasPrefix(e.Name(), "node") || err != nil {
			continue
		}
		dir := nodeDir + "/" + e.Name()
		m := NUMANode{ID: id}
		if m.CPUs, err = readCPUList(fsys, dir+"/cpulist"); err != nil {
			return fmt.Errorf("topology: NUMA node %d: %w", id, err)
		}
		m.MemoryBytes, err = readMemTotal(fsys, dir+"/meminfo")
		if err != nil {
			return fmt.Errorf("topology: NUMA node %d: %w", id, err)
		}
		n.NUMANodes = append(n.NUMANodes, m)
	}
	if len(n.NUMANodes) == 0 {
		// A kernel without NUMA support: one node holding every CPU.
		var all CPUSet
		for _, c := range n.CPUs {
			all.Add(c.ID)
		}
		n.NUMANodes = []NUMANode{{ID: 0, CPUs: all}}
	}
	sort.Slice(n.NUMANodes, func(i, j int) bool { return n.NUMANodes[i].ID < n.NUMANodes[j].ID })
	for i := range n.CPUs {
		for _, m := range n.NUMANodes {
			if m.CPUs.Contains(n.CPUs[i].ID) {
				n.CPUs[i].NUMA = m.ID
			}
		}
	}
	return nil
}

// readMemTotal reads "Node 0 MemTotal:  7956700 kB" from a node's meminfo.
func readMemTotal(fsys fs.FS, name string) (uint64, error) {
	s, err := readTrim(fsys, name)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[3], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: MemTotal: %w", name, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("%s: no MemTotal line", name)
}

// isBusID reports whether s looks like a PCI bus ID "dddd:bb:dd.f".
func isBusID(s string) bool {
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || len(dom) < 4 || len(rest) != 7 || rest[2] != ':' || rest[5] != '.' {
		return false
	}
	isHex := func(t string) bool {
		for _, c := range t {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
		return t != ""
	}
	return isHex(dom) && isHex(rest[:2]) && isHex(rest[3:5]) && isHex(rest[6:])
}

// resolve returns the real path of name in fsys, following symbolic
// links in any of its components (as realpath does). On a file system
// without symbolic links (no fs.ReadLinkFS) it reads the path recorded in
// name/RecordedPathFile, else returns name.
func resolve(fsys fs.FS, name string) string {
	if _, ok := fsys.(fs.ReadLinkFS); !ok {
		if s, err := readTrim(fsys, name+"/"+RecordedPathFile); err == nil {
			return strings.TrimPrefix(path.Clean(s), "/")
		}
		return name
	}
	parts := strings.Split(path.Clean(name), "/")
	for hops, i := 0, 1; i <= len(parts) && hops < 64; i++ {
		prefix := strings.Join(parts[:i], "/")
		target, err := fs.ReadLink(fsys, prefix)
		if err != nil {
			continue
		}
		hops++
		var base string
		if strings.HasPrefix(target, "/") {
			base = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			base = path.Join(path.Dir(prefix), target)
		}
		rest := append(strings.Split(base, "/"), parts[i:]...)
		parts, i = rest, 0
	}
	return strings.Join(parts, "/")
}

// pciChain splits the real sysfs path of a device
// ("sys/devices/pci0000:15/0000:15:01.0/.../0000:18:00.0/net/ib0") into
// its host bridge ("pci0000:15") and the PCI functions on the way down
// (root port first), stopping at the first component that is neither.
func pciChain(real string) (host string, chain []string) {
	rest, ok := strings.CutPrefix(real, devicesDir+"/")
	if !ok {
		return "", nil
	}
	for _, c := range strings.Split(rest, "/") {
		switch {
		case host == "" && strings.HasPrefix(c, "pci"):
			host = c
		case host != "" && isBusID(c):
			chain = append(chain, strings.ToLower(c))
		case host != "" && strings.HasPrefix(c, "pci") && len(chain) > 0:
			// A nested domain (Intel VMD): keep walking.
		default:
			return host, chain
		}
	}
	return host, chain
}

func readPCI(fsys fs.FS, n *Node) error {
	ents, err := fs.ReadDir(fsys, pciDevicesPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("topology: PCI devices: %w", err)
	}
	for _, e := range ents {
		id := strings.ToLower(e.Name())
		if !isBusID(id) {
			continue
		}
		dir := pciDevicesPath + "/" + e.Name()
		d := &PCIDevice{BusID: id, NUMA: -1}
		if d.Class, err = readTrim(fsys, dir+"/class"); err != nil {
			return fmt.Errorf("topology: PCI device %s: %w", id, err)
		}
		if d.Vendor, err = readTrim(fsys, dir+"/vendor"); err != nil {
			return fmt.Errorf("topology: PCI device %s: %w", id, err)
		}
		d.Device, _ = readTrim(fsys, dir+"/device")
		d.SubsystemVendor, _ = readTrim(fsys, dir+"/subsystem_vendor")
		d.SubsystemDevice, _ = readTrim(fsys, dir+"/subsystem_device")
		d.MaxLinkSpeed, _ = readTrim(fsys, dir+"/max_link_speed")
		if v, err := readInt(fsys, dir+"/max_link_width"); err == nil && v > 0 {
			d.MaxLinkWidth = v
		}
		if v, err := readInt(fsys, dir+"/numa_node"); err == nil {
			d.NUMA = v
		}
		d.LocalCPUs, _ = readCPUList(fsys, dir+"/local_cpulist")
		host, chain := pciChain(resolve(fsys, dir))
		d.HostBridge = host
		if len(chain) > 0 && chain[len(chain)-1] == id {
			d.Path = chain[:len(chain)-1]
		}
		if len(d.Path) > 0 {
			d.Parent = d.Path[len(d.Path)-1]
		}
		n.PCI[id] = d
	}
	return nil
}

// deviceNUMA returns the NUMA node of a PCI device: its numa_node, else
// the node of its local CPUs, else the only node when there is one; -1
// when unknown.
func (n *Node) deviceNUMA(busID string) int {
	d := n.PCI[busID]
	if d != nil && d.NUMA >= 0 {
		return d.NUMA
	}
	if d != nil && !d.LocalCPUs.IsEmpty() && d.LocalCPUs.Len() < len(n.CPUs) {
		if ids := n.NUMAOfCPUs(d.LocalCPUs); len(ids) == 1 {
			return ids[0]
		}
	}
	if len(n.NUMANodes) == 1 {
		return n.NUMANodes[0].ID
	}
	return -1
}

// deviceCPUs returns the CPUs close to a PCI device: its NUMA node's, else
// its local_cpulist.
func (n *Node) deviceCPUs(busID string, numa int) CPUSet {
	if numa >= 0 {
		if s := n.CPUsOfNUMA(numa); !s.IsEmpty() {
			return s
		}
	}
	if d := n.PCI[busID]; d != nil {
		return d.LocalCPUs
	}
	return CPUSet{}
}

// sysfsGPUs lists the node's GPUs from the PCI devices: NVIDIA's, then
// AMD's, then Intel's, each in PCI bus order and numbered from 0 in it.
func sysfsGPUs(n *Node) []GPU {
	var ids []string
	for id, d := range n.PCI {
		if gpuVendor(d.Vendor, d.Class) != "" {
			ids = append(ids, id)
		}
	}
	vendor := func(id string) string { return gpuVendor(n.PCI[id].Vendor, n.PCI[id].Class) }
	sort.Slice(ids, func(i, j int) bool {
		if a, b := vendorRank(vendor(ids[i])), vendorRank(vendor(ids[j])); a != b {
			return a < b
		}
		return ids[i] < ids[j]
	})
	gpus := []GPU{}
	count := map[string]int{}
	for _, id := range ids {
		v := vendor(id)
		numa := n.deviceNUMA(id)
		gpus = append(gpus, GPU{Index: count[v], Vendor: v, BusID: id, NUMA: numa, CPUs: n.deviceCPUs(id, numa)})
		count[v]++
	}
	return gpus
}

// ibRate parses an IB port's rate ("400 Gb/sec (4X NDR)") into Mb/s.
func ibRate(s string) int {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "Gb/sec" {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return int(v * 1000)
}

func busOf(fsys fs.FS, name string) string {
	real := resolve(fsys, name)
	if strings.Contains(real, "/virtual/") {
		return ""
	}
	_, chain := pciChain(real)
	if len(chain) == 0 {
		return ""
	}
	return chain[len(chain)-1]
}

func readNICs(fsys fs.FS, n *Node) error {
	n.NICs = []NIC{}
	ents, err := fs.ReadDir(fsys, netDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("topology: network interfaces: %w", err)
	}
	for _, e := range ents {
		dir := netDir + "/" + e.Name()
		bus := busOf(fsys, dir)
		if bus == "" {
			continue
		}
		nic := NIC{Name: e.Name(), BusID: bus}
		if v, err := readInt(fsys, dir+"/speed"); err == nil && v > 0 {
			nic.SpeedMbps = v
		}
		if s, err := readTrim(fsys, dir+"/operstate"); err == nil {
			nic.Up = s == "up"
		}
		n.NICs = append(n.NICs, nic)
	}
	ibs, err := fs.ReadDir(fsys, ibDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("topology: InfiniBand devices: %w", err)
	}
	for _, e := range ibs {
		dir := ibDir + "/" + e.Name()
		bus := busOf(fsys, dir)
		if bus == "" {
			continue
		}
		speed, up := 0, false
		ports, err := fs.ReadDir(fsys, dir+"/ports")
		if err != nil {
			return fmt.Errorf("topology: InfiniBand device %s: %w", e.Name(), err)
		}
		for _, p := range ports {
			pd := dir + "/ports/" + p.Name()
			state, _ := readTrim(fsys, pd+"/state")
			rate, _ := readTrim(fsys, pd+"/rate")
			if strings.HasSuffix(state, "ACTIVE") {
				up = true
				speed = max(speed, ibRate(rate))
			}
		}
		found := false
		for i := range n.NICs {
			if n.NICs[i].BusID == bus {
				found = true
				n.NICs[i].IBDevice = e.Name()
				if n.NICs[i].SpeedMbps == 0 {
					n.NICs[i].SpeedMbps = speed
				}
			}
		}
		if !found {
			n.NICs = append(n.NICs, NIC{Name: e.Name(), IBDevice: e.Name(), BusID: bus, SpeedMbps: speed, Up: up})
		}
	}
	sort.Slice(n.NICs, func(i, j int) bool {
		a, b := n.NICs[i], n.NICs[j]
		if a.BusID != b.BusID {
			return a.BusID < b.BusID
		}
		return a.Name < b.Name
	})
	for i := range n.NICs {
		n.NICs[i].NUMA = n.deviceNUMA(n.NICs[i].BusID)
		if !n.NICs[i].Up {
			n.NICs[i].SpeedMbps = 0
		}
	}
	return nil
}
