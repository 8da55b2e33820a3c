package topology

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// NCCL topology files.
//
// WriteNCCLTopo writes the XML that NCCL reads from NCCL_TOPO_FILE and
// writes to NCCL_TOPO_DUMP_FILE. NCCL publishes no schema; the format
// follows NCCL's own loader and writer (NVIDIA/nccl src/graph/xml.h,
// xml.cc: ncclTopoGetXmlFromFile and its handlers, ncclTopoDumpXmlRec,
// ncclTopoGetXmlFromSys, ncclTopoGetXmlFromGpu; src/graph/topo.cc:
// ncclTopoAddCpu, ncclTopoAddPci, ncclTopoAddGpu, ncclTopoAddNvLinks,
// ncclTopoAddNet, ncclTopoGetSystem):
//
//   - the root is <system version="1">; its children are <cpu> elements;
//   - a <cpu> has numaid and affinity (the NUMA node's cpumap: 32-bit hex
//     groups, most significant first, comma-separated); <pci> and <nic>
//     children;
//   - a <pci> has busid ("0000:1b:00.0"), class, vendor, device,
//     subsystem_vendor, subsystem_device, link_speed (the lower of the
//     device's and its upstream port's max_link_speed, as sysfs writes it)
//     and link_width (the smaller max_link_width, 0 for a missing one);
//     children <pci>, <gpu>, <nic>. NCCL nests PCI devices by walking each
//     device's sysfs path up two levels at a time: a switch is its
//     upstream port, root ports and downstream ports do not appear;
//   - a <gpu> has dev (NVML's index); its <nvlink> children have target
//     (the bus ID at the other end), count (active links) and tclass (the
//     target's PCI class, 0x068000 for an NVSwitch);
//   - a <nic> holds <net> elements with name (the RDMA device, else the
//     netdev) and speed (Mb/s).
//
// Attributes NCCL sets itself at run time are left out, so that NCCL
// fills them as it would without the file: a GPU's rank, gdr, sm and
// keep, a net's dev, port, guid, latency, maxconn and gdr (NCCL keeps a
// file's gdr, speed and latency over what it detects), a CPU's host_hash,
// and the CPU's arch, vendor, familyid and modelid, which NCCL reads from
// the CPU it runs on when the file has none.

// NCCLTopoVersion is the version NCCL requires of <system> (xml.h's
// NCCL_TOPO_XML_VERSION).
const NCCLTopoVersion = 1

// NCCL's PCI classes for the targets of NVLinks it cannot see (xml.cc
// assumes an NVSwitch; topo.cc maps 0x068001 to a CPU).
const (
	ncclClassNVSwitch = "0x068000"
	ncclClassCPU      = "0x068001"
)

// xmlNode is one element of an NCCL topology.
type xmlNode struct {
	name  string
	attrs [][2]string
	subs  []*xmlNode
}

func (x *xmlNode) set(key, value string) { x.attrs = append(x.attrs, [2]string{key, value}) }

func (x *xmlNode) add(name string) *xmlNode {
	c := &xmlNode{name: name}
	x.subs = append(x.subs, c)
	return c
}

// write writes x as NCCL's ncclTopoDumpXmlRec does: two spaces of indent
// per level, attributes in double quotes, childless elements closed with
// "/>". NCCL's parser knows no entities, so a value that would need one
// is an error.
func (x *xmlNode) write(b *strings.Builder, indent int) error {
	b.WriteString(strings.Repeat(" ", indent) + "<" + x.name)
	for _, a := range x.attrs {
		if strings.ContainsAny(a[1], "\"'<>&\n\r") {
			return fmt.Errorf("NCCL topology: <%s %s=%q>: NCCL cannot read that value", x.name, a[0], a[1])
		}
		fmt.Fprintf(b, " %s=\"%s\"", a[0], a[1])
	}
	if len(x.subs) == 0 {
		b.WriteString("/>\n")
		return nil
	}
	b.WriteString(">\n")
	for _, s := range x.subs {
		if err := s.write(b, indent+2); err != nil {
			return err
		}
	}
	b.WriteString(strings.Repeat(" ", indent) + "</" + x.name + ">\n")
	return nil
}

// WriteNCCLTopo writes the node as an NCCL topology file (NCCL_TOPO_FILE):
// a <cpu> per NUMA node with CPUs (and one with numaid -1 for devices of
// no known node), under each the PCI tree of its NVIDIA GPUs and its NICs
// with their switches, the GPUs' NVLinks (from NVML), and the NICs' net
// devices. AMD and Intel GPUs are left out: NCCL does not drive them.
func (n *Node) WriteNCCLTopo(w io.Writer) error {
	var b strings.Builder
	if err := n.ncclSystem().write(&b, 0); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ncclSystem builds the <system> tree.
func (n *Node) ncclSystem() *xmlNode {
	sys := &xmlNode{name: "system"}
	sys.set("version", strconv.Itoa(NCCLTopoVersion))
	t := ncclTree{n: n, cpus: map[int]*xmlNode{}, pci: map[string]*xmlNode{}, nics: map[string]*xmlNode{}}
	for _, m := range n.NUMANodes {
		if !m.CPUs.IsEmpty() {
			t.cpu(m.ID)
		}
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Vendor != VendorNVIDIA {
			continue
		}
		gpu := t.pciNode(g.BusID, g.NUMA, "0x03").add("gpu")
		gpu.set("dev", strconv.Itoa(g.Index))
		for _, l := range g.NVLinkTargets {
			if l.Links <= 0 {
				continue
			}
			nv := gpu.add("nvlink")
			nv.set("target", l.RemoteBusID)
			nv.set("count", strconv.Itoa(l.Links))
			nv.set("tclass", n.nvlinkClass(l))
		}
	}
	for _, nic := range n.NICs {
		x := t.nics[nic.BusID]
		if x == nil {
			x = t.pciNode(nic.BusID, nic.NUMA, "0x02").add("nic")
			t.nics[nic.BusID] = x
		}
		net := x.add("net")
		name := nic.Name
		if nic.IBDevice != "" {
			name = nic.IBDevice
		}
		net.set("name", name)
		if nic.SpeedMbps > 0 {
			net.set("speed", strconv.Itoa(nic.SpeedMbps))
		}
	}
	ids := make([]int, 0, len(t.cpus))
	for id := range t.cpus {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		sys.subs = append(sys.subs, t.cpus[id])
	}
	sortPCI(sys)
	return sys
}

// nvlinkClass is the PCI class of an NVLink's target: sysfs's when the
// node has the device, else by NVML's remote type.
func (n *Node) nvlinkClass(l NVLinkInfo) string {
	if d := n.PCI[l.RemoteBusID]; d != nil && d.Class != "" {
		return d.Class
	}
	switch l.RemoteType {
	case NVLinkRemoteGPU:
		return "0x030200" // a 3D controller, as NVIDIA's data-center GPUs are
	case NVLinkRemoteNPU:
		return ncclClassCPU
	}
	return ncclClassNVSwitch
}

// ncclTree builds the <cpu> and <pci> elements, each once.
type ncclTree struct {
	n    *Node
	cpus map[int]*xmlNode
	pci  map[string]*xmlNode
	nics map[string]*xmlNode
}

// cpu returns the <cpu> of NUMA node id, made on first use.
func (t *ncclTree) cpu(id int) *xmlNode {
	if c := t.cpus[id]; c != nil {
		return c
	}
	c := &xmlNode{name: "cpu"}
	c.set("numaid", strconv.Itoa(id))
	if id >= 0 {
		if set := t.n.CPUsOfNUMA(id); !set.IsEmpty() {
			c.set("affinity", cpuMask(set))
		}
	}
	t.cpus[id] = c
	return c
}

// ncclParents returns the bus IDs of the <pci> elements above a device
// whose bridges (root port first, as PCIDevice.Path) are path, top first:
// NCCL walks up two levels at a time, so it keeps path[len-2],
// path[len-4], ... (a switch's upstream port above a downstream port).
func ncclParents(path []string) []string {
	var out []string
	for i := len(path) - 2; i >= 0; i -= 2 {
		out = append([]string{path[i]}, out...)
	}
	return out
}

// pciNode returns the <pci> element of bus, with the elements above it,
// under the <cpu> of numa. A device sysfs does not know gets the class
// NCCL would give it (fallback: "0x03" for a GPU, "0x02" for a NIC).
func (t *ncclTree) pciNode(bus string, numa int, fallback string) *xmlNode {
	if x := t.pci[bus]; x != nil {
		return x
	}
	var chain []string
	if d := t.n.PCI[bus]; d != nil {
		chain = ncclParents(d.Path)
	}
	chain = append(chain, bus)
	parent := t.cpu(numa)
	for _, id := range chain {
		x := t.pci[id]
		if x == nil {
			x = t.newPCI(id, fallback)
			parent.subs = append(parent.subs, x)
			t.pci[id] = x
		}
		parent = x
	}
	return parent
}

// newPCI makes the <pci> element of bus id from the node's PCI device.
func (t *ncclTree) newPCI(id, fallback string) *xmlNode {
	x := &xmlNode{name: "pci"}
	x.set("busid", id)
	d := t.n.PCI[id]
	if d == nil {
		x.set("class", fallback)
		return x
	}
	x.set("class", d.Class)
	for _, a := range [][2]string{{"vendor", d.Vendor}, {"device", d.Device},
		{"subsystem_vendor", d.SubsystemVendor}, {"subsystem_device", d.SubsystemDevice}} {
		if a[1] != "" {
			x.set(a[0], a[1])
		}
	}
	if d.MaxLinkSpeed == "" && d.MaxLinkWidth == 0 {
		return x
	}
	var port *PCIDevice
	if d.Parent != "" {
		port = t.n.PCI[d.Parent]
	}
	speed, width := d.MaxLinkSpeed, d.MaxLinkWidth
	if port == nil {
		width = 0 // NCCL reads the host bridge's max_link_width: none
	} else {
		if gtps(port.MaxLinkSpeed) < gtps(speed) {
			speed = port.MaxLinkSpeed
		}
		width = min(width, port.MaxLinkWidth)
	}
	x.set("link_speed", speed)
	x.set("link_width", strconv.Itoa(width))
	return x
}

// gtps reads the GT/s of a max_link_speed ("16.0 GT/s PCIe"); an
// unreadable one is the highest, as NCCL takes it.
func gtps(s string) float64 {
	f := strings.Fields(s)
	if len(f) >= 2 && f[1] == "GT/s" {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return 1e300
}

// sortPCI orders every element's <pci> children by bus ID, as NCCL keeps
// them, recursively; other children keep their places.
func sortPCI(x *xmlNode) {
	var slots []int
	var pci []*xmlNode
	for i, s := range x.subs {
		if s.name == "pci" {
			slots = append(slots, i)
			pci = append(pci, s)
		}
	}
	sort.SliceStable(pci, func(i, j int) bool { return pci[i].attrs[0][1] < pci[j].attrs[0][1] })
	for k, i := range slots {
		x.subs[i] = pci[k]
	}
	for _, s := range x.subs {
		sortPCI(s)
	}
}

// cpuMask writes a CPU set as sysfs's cpumap does, which NCCL reads into
// a cpu_set_t: 32-bit groups of 8 hex digits, most significant first,
// separated by commas.
func cpuMask(s CPUSet) string {
	cpus := s.CPUs()
	if len(cpus) == 0 {
		return "00000000"
	}
	groups := make([]uint32, cpus[len(cpus)-1]/32+1)
	for _, c := range cpus {
		groups[c/32] |= 1 << (c % 32)
	}
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[len(groups)-1-i] = fmt.Sprintf("%08x", g)
	}
	return strings.Join(parts, ",")
}
