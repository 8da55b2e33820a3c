package topology

import "strconv"

// Node is everything discovery knows about one machine. It marshals to
// JSON as is.
type Node struct {
	// Packages are the physical packages (sockets), by ID.
	Packages []Package `json:"packages"`
	// NUMANodes are the NUMA nodes, by ID.
	NUMANodes []NUMANode `json:"numa_nodes"`
	// CPUs are the online logical CPUs (hardware threads), by ID.
	CPUs []CPU `json:"cpus"`
	// GPUs are the GPUs (NVIDIA, AMD and Intel data-center GPUs), NVIDIA's
	// first, in NVML order when NVML answered (PCI bus order, unless
	// Warnings says otherwise), else in PCI bus order; then AMD's, then
	// Intel's, each in PCI bus order.
	GPUs []GPU `json:"gpus"`
	// NICs are the network interfaces backed by a PCI device (virtual
	// interfaces are left out), by PCI bus ID then name.
	NICs []NIC `json:"nics"`
	// PCI holds every PCI device and bridge, by bus ID
	// ("0000:1b:00.0", lower case).
	PCI map[string]*PCIDevice `json:"pci"`
	// GPUSource says where the NVIDIA GPUs came from: "nvml" or "sysfs".
	GPUSource string `json:"gpu_source"`
	// NVMLStatus says why NVML was not used when GPUSource is "sysfs"
	// ("NVML library (libnvidia-ml.so.1) not found", "gorun was built
	// without cgo", an Init error); empty when NVML answered.
	NVMLStatus string `json:"nvml_status,omitempty"`
	// Warnings are problems discovery worked around (NVML present but
	// failing, for one).
	Warnings []string `json:"warnings,omitempty"`
}

// Package is a physical package (socket).
type Package struct {
	// ID is the kernel's physical_package_id.
	ID int `json:"id"`
	// CPUs are the package's online logical CPUs.
	CPUs CPUSet `json:"cpus"`
	// Cores is the number of distinct cores in the package.
	Cores int `json:"cores"`
}

// NUMANode is a NUMA node.
type NUMANode struct {
	// ID is the node number N of /sys/devices/system/node/nodeN.
	ID int `json:"id"`
	// CPUs are the node's CPUs (its cpulist).
	CPUs CPUSet `json:"cpus"`
	// MemoryBytes is the node's MemTotal.
	MemoryBytes uint64 `json:"memory_bytes"`
}

// CPU is one logical CPU (a hardware thread).
type CPU struct {
	// ID is the logical CPU number.
	ID int `json:"id"`
	// Core is the core_id, unique within a package only.
	Core int `json:"core"`
	// Package is the physical_package_id.
	Package int `json:"package"`
	// NUMA is the NUMA node holding the CPU.
	NUMA int `json:"numa"`
	// Siblings are the hardware threads of the same core, this one included.
	Siblings CPUSet `json:"siblings"`
}

// The GPU vendors discovery knows.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
	VendorIntel  = "intel"
)

// GPU is a GPU: an NVIDIA GPU, or an AMD or Intel data-center GPU.
type GPU struct {
	// Index is the GPU's number among its vendor's GPUs: NVML's index for
	// NVIDIA GPUs (CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID), the PCI bus
	// order for the others (ROCm's and Level Zero's device numbers).
	Index int `json:"index"`
	// Vendor is VendorNVIDIA, VendorAMD or VendorIntel.
	Vendor string `json:"vendor"`
	// UUID is NVML's UUID ("GPU-..."), empty without NVML.
	UUID string `json:"uuid,omitempty"`
	// BusID is the PCI bus ID, lower case ("0000:1b:00.0").
	BusID string `json:"bus_id"`
	// NUMA is the GPU's NUMA node, -1 when unknown.
	NUMA int `json:"numa"`
	// CPUs are the CPUs close to the GPU (NVML's CPU affinity, else the
	// PCI device's local_cpulist).
	CPUs CPUSet `json:"cpus"`
	// MemoryBytes is the GPU's memory, 0 without NVML.
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// NVLinks maps a peer GPU's index to the number of NVLinks between
	// the two (direct links, or links that meet through NVSwitches).
	NVLinks map[int]int `json:"nvlinks,omitempty"`
	// NVLinkTargets are the GPU's active NVLinks grouped by the device at
	// their other end (a GPU, an NVSwitch), as NVML reports them, bus IDs
	// normalized; empty without NVML.
	NVLinkTargets []NVLinkInfo `json:"nvlink_targets,omitempty"`
	// P2P maps a peer GPU's index to NVML's peer-to-peer read status
	// ("OK", "NS" not supported, ...), empty without NVML.
	P2P map[int]string `json:"p2p,omitempty"`
	// MIG reports whether MIG mode is enabled (current mode).
	MIG bool `json:"mig"`
}

// Name is how reports name the GPU: "GPU 3", "AMD GPU 3", "Intel GPU 3".
func (g *GPU) Name() string {
	switch g.Vendor {
	case VendorAMD:
		return "AMD GPU " + strconv.Itoa(g.Index)
	case VendorIntel:
		return "Intel GPU " + strconv.Itoa(g.Index)
	}
	return "GPU " + strconv.Itoa(g.Index)
}

// NIC is a network interface backed by a PCI device: an Ethernet
// netdev, an InfiniBand HCA port's netdev, or an RDMA device without
// netdev.
type NIC struct {
	// Name is the netdev name, or the RDMA device name when it has none.
	Name string `json:"name"`
	// IBDevice is the RDMA device on the same PCI function ("mlx5_0"), if any.
	IBDevice string `json:"ib_device,omitempty"`
	// BusID is the PCI function's bus ID.
	BusID string `json:"bus_id"`
	// NUMA is the NIC's NUMA node, -1 when unknown.
	NUMA int `json:"numa"`
	// SpeedMbps is the link speed in Mb/s (netdev speed, or the IB port's
	// rate), 0 when unknown or down.
	SpeedMbps int `json:"speed_mbps"`
	// Up reports whether the link is up (operstate up, or IB port ACTIVE).
	Up bool `json:"up"`
}

// PCIDevice is a PCI function, bridge or endpoint.
type PCIDevice struct {
	// BusID is "domain:bus:device.function", lower case.
	BusID string `json:"bus_id"`
	// Class is the 24-bit class code ("0x030200").
	Class string `json:"class"`
	// Vendor and Device are the PCI IDs ("0x10de", "0x2330").
	Vendor string `json:"vendor"`
	Device string `json:"device"`
	// SubsystemVendor and SubsystemDevice are the subsystem IDs, empty
	// when sysfs has none.
	SubsystemVendor string `json:"subsystem_vendor,omitempty"`
	SubsystemDevice string `json:"subsystem_device,omitempty"`
	// MaxLinkSpeed is the device's max_link_speed as sysfs writes it
	// ("32.0 GT/s PCIe"), empty when unknown.
	MaxLinkSpeed string `json:"max_link_speed,omitempty"`
	// MaxLinkWidth is the device's max_link_width (lanes), 0 when unknown.
	MaxLinkWidth int `json:"max_link_width,omitempty"`
	// NUMA is the kernel's numa_node, -1 when the firmware gives none.
	NUMA int `json:"numa"`
	// LocalCPUs is the device's local_cpulist.
	LocalCPUs CPUSet `json:"local_cpus"`
	// Parent is the bus ID of the bridge above the device, empty
	// directly under a host bridge.
	Parent string `json:"parent,omitempty"`
	// HostBridge names the root complex the device sits under, as sysfs
	// names it ("pci0000:15").
	HostBridge string `json:"host_bridge"`
	// Path lists the bridges from the root port down to the device's
	// parent, root port first.
	Path []string `json:"path,omitempty"`
}

// IsBridge reports whether the device is a PCI-to-PCI bridge (class 0x0604).
func (d *PCIDevice) IsBridge() bool { return len(d.Class) >= 6 && d.Class[:6] == "0x0604" }

// CPUsOfNUMA returns the CPUs of NUMA node id, empty when there is none.
func (n *Node) CPUsOfNUMA(id int) CPUSet {
	for _, m := range n.NUMANodes {
		if m.ID == id {
			return m.CPUs
		}
	}
	return CPUSet{}
}

// NUMAOfCPUs returns the NUMA nodes whose CPUs meet set, in order.
func (n *Node) NUMAOfCPUs(set CPUSet) []int {
	var out []int
	for _, m := range n.NUMANodes {
		if !m.CPUs.Intersect(set).IsEmpty() {
			out = append(out, m.ID)
		}
	}
	return out
}

// Restrict returns a copy of n that keeps only the CPUs in allowed (the
// CPUs a process may run on: a resource manager's cpuset, taskset): the
// CPU list, each package's and NUMA node's CPUs, the siblings and the
// package core counts shrink to them. An empty allowed set, or one that
// leaves no CPU, returns n itself.
func (n *Node) Restrict(allowed CPUSet) *Node {
	if allowed.IsEmpty() {
		return n
	}
	r := *n
	r.CPUs = nil
	cores := map[[2]int]bool{}
	for _, c := range n.CPUs {
		if !allowed.Contains(c.ID) {
			continue
		}
		c.Siblings = c.Siblings.Intersect(allowed)
		r.CPUs = append(r.CPUs, c)
		cores[[2]int{c.Package, c.Core}] = true
	}
	if len(r.CPUs) == 0 || len(r.CPUs) == len(n.CPUs) {
		return n
	}
	r.Packages = make([]Package, len(n.Packages))
	for i, p := range n.Packages {
		p.CPUs = p.CPUs.Intersect(allowed)
		p.Cores = 0
		for k := range cores {
			if k[0] == p.ID {
				p.Cores++
			}
		}
		r.Packages[i] = p
	}
	r.NUMANodes = make([]NUMANode, len(n.NUMANodes))
	for i, m := range n.NUMANodes {
		m.CPUs = m.CPUs.Intersect(allowed)
		r.NUMANodes[i] = m
	}
	return &r
}
