package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Discover builds a Node from the sysfs tree under root and, when lib's
// Init succeeds, from NVML, whose GPUs replace the NVIDIA GPUs of sysfs
// (AMD's and Intel's stay). When Init fails discovery falls back to
// sysfs, Node.NVMLStatus says why (a failure other than ErrNVMLNotFound
// is also noted in Node.Warnings), and no other method of lib is called.
// A nil lib means sysfs only. The error is about sysfs, or about NVML
// after a successful Init.
func Discover(root fs.FS, lib NVML) (*Node, error) {
	n, err := ReadSysfs(root)
	if err != nil {
		return nil, err
	}
	if lib == nil {
		n.NVMLStatus = "not asked"
		return n, nil
	}
	if err := lib.Init(); err != nil {
		n.NVMLStatus = err.Error()
		if errors.Is(err, ErrNVMLNotFound) {
			n.NVMLStatus = ErrNVMLNotFound.Error()
			if errors.Is(err, ErrNoCgo) {
				n.NVMLStatus = ErrNoCgo.Error()
			}
		} else {
			n.Warnings = append(n.Warnings, fmt.Sprintf("NVML unavailable, GPUs from sysfs: %v", err))
		}
		return n, nil
	}
	gpus, err := nvmlGPUs(n, lib)
	if serr := lib.Shutdown(); err == nil && serr != nil {
		err = fmt.Errorf("topology: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	// NVML's GPUs replace sysfs's NVIDIA ones; AMD's and Intel's stay.
	for i := 1; i < len(gpus); i++ {
		if gpus[i].BusID < gpus[i-1].BusID {
			n.Warnings = append(n.Warnings, fmt.Sprintf("NVML numbers the GPUs out of PCI bus order (GPU %d at %s comes after GPU %d at %s): "+
				"gorun pairs local ranks with GPUs in PCI bus order, as CUDA numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID", i, gpus[i].BusID, i-1, gpus[i-1].BusID))
			break
		}
	}
	for _, g := range n.GPUs {
		if g.Vendor != VendorNVIDIA {
			gpus = append(gpus, g)
		}
	}
	n.GPUs = gpus
	n.GPUSource = "nvml"
	return n, nil
}

// DiscoverLocal discovers this machine: sysfs under "/", and lib (package
// nvmllib's, or nil for none) when libnvidia-ml loads.
func DiscoverLocal(lib NVML) (*Node, error) { return Discover(os.DirFS("/"), lib) }

func nvmlGPUs(n *Node, lib NVML) ([]GPU, error) {
	count, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	infos := make([]GPUInfo, count)
	byBus := map[string]int{}
	for i := range infos {
		if infos[i], err = lib.Device(i); err != nil {
			return nil, fmt.Errorf("topology: GPU %d: %w", i, err)
		}
		byBus[NormalizeBusID(infos[i].BusID)] = i
	}
	gpus := make([]GPU, count)
	for i, info := range infos {
		g := GPU{Index: i, Vendor: VendorNVIDIA, UUID: info.UUID, BusID: NormalizeBusID(info.BusID), NUMA: info.NUMA,
			CPUs: info.CPUAffinity, MemoryBytes: info.MemoryBytes, MIG: info.MIG}
		if g.NUMA < 0 {
			g.NUMA = n.deviceNUMA(g.BusID)
		}
		if g.CPUs.IsEmpty() {
			g.CPUs = n.deviceCPUs(g.BusID, g.NUMA)
		}
		for _, l := range info.NVLinks {
			l.RemoteBusID = NormalizeBusID(l.RemoteBusID)
			g.NVLinkTargets = append(g.NVLinkTargets, l)
		}
		gpus[i] = g
	}
	// NVLinks: direct links count per peer; links into NVSwitches join
	// every pair of GPUs on the switches, as many links as the poorer of
	// the two has.
	switchLinks := make([]int, count)
	for i, info := range infos {
		for _, l := range info.NVLinks {
			switch l.RemoteType {
			case NVLinkRemoteSwitch:
				switchLinks[i] += l.Links
			case NVLinkRemoteGPU:
				if j, ok := byBus[NormalizeBusID(l.RemoteBusID)]; ok && j != i {
					if gpus[i].NVLinks == nil {
						gpus[i].NVLinks = map[int]int{}
					}
					gpus[i].NVLinks[j] += l.Links
				}
			}
		}
	}
	for i := range gpus {
		for j := range gpus {
			if i == j {
				continue
			}
			if s := min(switchLinks[i], switchLinks[j]); s > 0 {
				if gpus[i].NVLinks == nil {
					gpus[i].NVLinks = map[int]int{}
				}
				gpus[i].NVLinks[j] += s
			}
			st, err := lib.P2PStatus(i, j)
			if err != nil {
				return nil, fmt.Errorf("topology: P2P status of GPUs %d and %d: %w", i, j, err)
			}
			if gpus[i].P2P == nil {
				gpus[i].P2P = map[int]string{}
			}
			gpus[i].P2P[j] = st
		}
	}
	return gpus, nil
}
