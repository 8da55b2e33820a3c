package topology

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// LinkKind is the kind of path between two devices, closest first.
type LinkKind int

// The link kinds, as `nvidia-smi topo -m` names them.
const (
	// LinkSelf is a device and itself ("X").
	LinkSelf LinkKind = iota
	// LinkNVLink is a bonded set of NVLinks ("NV#").
	LinkNVLink
	// LinkPIX traverses at most a single PCIe bridge (switch).
	LinkPIX
	// LinkPXB traverses several PCIe bridges, no host bridge.
	LinkPXB
	// LinkPHB traverses a PCIe host bridge: same root complex.
	LinkPHB
	// LinkNODE traverses the interconnect between host bridges of one
	// NUMA node.
	LinkNODE
	// LinkSYS traverses the SMP interconnect between NUMA nodes.
	LinkSYS
)

// LinkClass is the link between two devices: its kind, and for
// LinkNVLink the number of links.
type LinkClass struct {
	Kind    LinkKind
	NVLinks int
}

// String names the class as nvidia-smi does: "X", "NV18", "PIX", "PXB",
// "PHB", "NODE", "SYS".
func (c LinkClass) String() string {
	switch c.Kind {
	case LinkSelf:
		return "X"
	case LinkNVLink:
		return "NV" + strconv.Itoa(c.NVLinks)
	case LinkPIX:
		return "PIX"
	case LinkPXB:
		return "PXB"
	case LinkPHB:
		return "PHB"
	case LinkNODE:
		return "NODE"
	default:
		return "SYS"
	}
}

// MarshalText writes the class's String.
func (c LinkClass) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// DeviceKind says which list of a Node a DeviceRef indexes.
type DeviceKind int

// Device kinds.
const (
	// DeviceGPU indexes Node.GPUs.
	DeviceGPU DeviceKind = iota
	// DeviceNIC indexes Node.NICs.
	DeviceNIC
)

// DeviceRef names a GPU or NIC of a Node by its position in Node.GPUs or
// Node.NICs.
type DeviceRef struct {
	Kind  DeviceKind
	Index int
}

// GPURef refers to Node.GPUs[i].
func GPURef(i int) DeviceRef { return DeviceRef{DeviceGPU, i} }

// NICRef refers to Node.NICs[i].
func NICRef(i int) DeviceRef { return DeviceRef{DeviceNIC, i} }

// String names the device as nvidia-smi does: "GPU0", "NIC3".
func (r DeviceRef) String() string {
	if r.Kind == DeviceGPU {
		return "GPU" + strconv.Itoa(r.Index)
	}
	return "NIC" + strconv.Itoa(r.Index)
}

// MarshalText writes the ref's String.
func (r DeviceRef) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// device returns a ref's bus ID and NUMA node; ok is false for a ref out
// of range.
func (n *Node) device(r DeviceRef) (bus string, numa int, ok bool) {
	switch {
	case r.Kind == DeviceGPU && r.Index >= 0 && r.Index < len(n.GPUs):
		return n.GPUs[r.Index].BusID, n.GPUs[r.Index].NUMA, true
	case r.Kind == DeviceNIC && r.Index >= 0 && r.Index < len(n.NICs):
		return n.NICs[r.Index].BusID, n.NICs[r.Index].NUMA, true
	}
	return "", -1, false
}

// switches returns the PCIe switches above a device under its root
// port, named by their upstream ports: the bridges below the root port
// come in pairs, a switch's upstream port and one of its downstream ports.
func switches(d *PCIDevice) []string {
	var out []string
	for i := 1; i < len(d.Path); i += 2 {
		out = append(out, d.Path[i])
	}
	return out
}

// Link returns the link between devices a and b. GPUs with NVLinks
// between them are NV#; otherwise the class comes from their PCIe
// paths: the switches they share, their root ports and root complexes,
// and their NUMA nodes. Devices the node does not know, or without a
// PCIe path, are SYS unless they share a NUMA node (NODE).
func (n *Node) Link(a, b DeviceRef) LinkClass {
	busA, numaA, okA := n.device(a)
	busB, numaB, okB := n.device(b)
	if a == b && okA {
		return LinkClass{Kind: LinkSelf}
	}
	if !okA || !okB {
		return LinkClass{Kind: LinkSYS}
	}
	if a.Kind == DeviceGPU && b.Kind == DeviceGPU {
		if k := n.GPUs[a.Index].NVLinks[b.Index]; k > 0 {
			return LinkClass{Kind: LinkNVLink, NVLinks: k}
		}
	}
	sameNUMA := numaA >= 0 && numaA == numaB
	da, db := n.PCI[busA], n.PCI[busB]
	if da == nil || db == nil || da.HostBridge == "" || da.HostBridge != db.HostBridge {
		if sameNUMA {
			return LinkClass{Kind: LinkNODE}
		}
		return LinkClass{Kind: LinkSYS}
	}
	if busA == busB || (len(da.Path) > 0 && len(db.Path) > 0 && da.Path[0] == db.Path[0]) {
		sa, sb := switches(da), switches(db)
		c := 0
		for c < len(sa) && c < len(sb) && sa[c] == sb[c] {
			c++
		}
		if c == 0 || len(sa)-c+len(sb)-c == 0 {
			// Functions of one device, or one switch between them.
			return LinkClass{Kind: LinkPIX}
		}
		return LinkClass{Kind: LinkPXB}
	}
	return LinkClass{Kind: LinkPHB}
}

// LinkMatrix is the link class between every two GPUs and NICs of a
// node, as `nvidia-smi topo -m` shows it.
type LinkMatrix struct {
	// Devices are the rows and columns: the GPUs, then the NICs.
	Devices []DeviceRef `json:"devices"`
	// Links[i][j] is the link between Devices[i] and Devices[j].
	Links [][]LinkClass `json:"links"`
}

// Matrix returns the link matrix of the node's GPUs and NICs.
func Matrix(n *Node) LinkMatrix {
	var m LinkMatrix
	for i := range n.GPUs {
		m.Devices = append(m.Devices, GPURef(i))
	}
	for i := range n.NICs {
		m.Devices = append(m.Devices, NICRef(i))
	}
	m.Links = make([][]LinkClass, len(m.Devices))
	for i, a := range m.Devices {
		m.Links[i] = make([]LinkClass, len(m.Devices))
		for j, b := range m.Devices {
			m.Links[i][j] = n.Link(a, b)
		}
	}
	return m
}

const legend = `
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// FormatMatrix prints the node's link matrix as `nvidia-smi topo -m`
// does: tab-separated, GPUs then NICs as rows and columns, the CPU and
// NUMA affinity of each row (NIC rows too, unlike nvidia-smi), the
// legend and the NIC legend. A node without GPUs also gets its packages
// and NUMA nodes (CPUs, memory) listed.
func FormatMatrix(w io.Writer, n *Node) error {
	var b strings.Builder
	m := Matrix(n)
	if len(m.Devices) > 0 {
		for _, d := range m.Devices {
			b.WriteString("\t" + d.String())
		}
		b.WriteString("\tCPU Affinity\tNUMA Affinity\n")
		for i, d := range m.Devices {
			b.WriteString(d.String())
			for _, c := range m.Links[i] {
				if c.Kind == LinkSelf {
					b.WriteString("\t X ")
				} else {
					b.WriteString("\t" + c.String())
				}
			}
			cpus, numa := n.affinity(d)
			fmt.Fprintf(&b, "\t%s\t%s\n", cpus, numa)
		}
	}
	if len(n.GPUs) == 0 {
		if len(m.Devices) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("No GPUs.\n")
		cores := 0
		for _, p := range n.Packages {
			cores += p.Cores
		}
		fmt.Fprintf(&b, "CPUs: %d in %d package(s), %d core(s)\n\n", len(n.CPUs), len(n.Packages), cores)
		b.WriteString("NUMA\tCPUs\tMemory\n")
		for _, nn := range n.NUMANodes {
			fmt.Fprintf(&b, "node%d\t%s\t%.1f GiB\n", nn.ID, orNA(nn.CPUs.String()), float64(nn.MemoryBytes)/(1<<30))
		}
	}
	b.WriteString(legend)
	if len(n.NICs) > 0 {
		b.WriteString("\nNIC Legend:\n\n")
		for i, nic := range n.NICs {
			name := nic.Name
			if nic.IBDevice != "" {
				name = nic.IBDevice
			}
			fmt.Fprintf(&b, "  NIC%d: %s\n", i, name)
		}
	}
	formatGPUs(&b, n)
	_, err := io.WriteString(w, b.String())
	return err
}

// formatGPUs writes what the matrix does not show about the GPUs: each
// GPU's vendor, PCI device, UUID, memory and MIG mode, where the NVIDIA
// GPUs came from (and why not NVML), the peer-to-peer read status between
// NVIDIA GPUs as `nvidia-smi topo -p2p r` prints it, and discovery's
// warnings.
func formatGPUs(b *strings.Builder, n *Node) {
	if len(n.GPUs) == 0 {
		for _, w := range n.Warnings {
			fmt.Fprintf(b, "\nWarning: %s\n", w)
		}
		return
	}
	b.WriteString("\nGPU Legend:\n\n")
	nvidia := 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		name := g.Name()
		if g.Vendor == VendorNVIDIA {
			name = "NVIDIA " + name
		}
		fmt.Fprintf(b, "  GPU%d: %s at %s", i, name, g.BusID)
		if d := n.PCI[g.BusID]; d != nil {
			fmt.Fprintf(b, " (%s:%s)", d.Vendor, d.Device)
		}
		if g.UUID != "" {
			fmt.Fprintf(b, ", %s", g.UUID)
		}
		if g.MemoryBytes > 0 {
			fmt.Fprintf(b, ", %.0f GiB", float64(g.MemoryBytes)/(1<<30))
		}
		if g.Vendor == VendorNVIDIA {
			nvidia++
			if n.GPUSource == "nvml" {
				mig := "off"
				if g.MIG {
					mig = "on"
				}
				fmt.Fprintf(b, ", MIG %s", mig)
			}
		}
		b.WriteString("\n")
	}
	switch {
	case nvidia > 0 && n.GPUSource == "nvml":
		b.WriteString("\nNVIDIA GPUs from NVML.\n")
	case nvidia > 0:
		fmt.Fprintf(b, "\nNVIDIA GPUs from sysfs, not NVML (%s): no UUIDs, memory, NVLinks, peer-to-peer status or MIG mode.\n", orNA(n.NVMLStatus))
	}
	if len(n.GPUs) > nvidia {
		if nvidia == 0 {
			b.WriteString("\n")
		}
		b.WriteString("AMD and Intel GPUs from sysfs: their numbers are their PCI bus order.\n")
	}
	if nvidia > 1 && n.GPUSource == "nvml" {
		b.WriteString("\nP2P read status (as nvidia-smi topo -p2p r):\n\n")
		for i := range nvidia {
			fmt.Fprintf(b, "\tGPU%d", i)
		}
		b.WriteString("\n")
		for i := range nvidia {
			fmt.Fprintf(b, "GPU%d", i)
			for j := range nvidia {
				st := n.GPUs[i].P2P[j]
				if i == j {
					st = " X "
				} else if st == "" {
					st = "N/A"
				}
				b.WriteString("\t" + st)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n  GNS  = GPU not supported\n" +
			"  TNS  = Topology not supported\n  NS   = Not supported\n  U    = Unknown\n")
	}
	for _, w := range n.Warnings {
		fmt.Fprintf(b, "\nWarning: %s\n", w)
	}
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}

func (n *Node) affinity(d DeviceRef) (cpus, numa string) {
	var set CPUSet
	id := -1
	if d.Kind == DeviceGPU {
		set, id = n.GPUs[d.Index].CPUs, n.GPUs[d.Index].NUMA
	} else {
		id = n.NICs[d.Index].NUMA
		set = n.deviceCPUs(n.NICs[d.Index].BusID, id)
	}
	numa = "N/A"
	if id >= 0 {
		numa = strconv.Itoa(id)
	}
	return orNA(set.String()), numa
}
