package topology

import (
	"errors"
	"strings"
)

// NVML is the part of NVIDIA's management library that discovery uses,
// behind an interface of gorun's own: the real one (nvmllib.New) needs cgo
// and libnvidia-ml, FakeNVML serves recorded machines in tests.
//
// After Init returns an error, a caller calls no other method: with the
// real library even Shutdown kills the process then.
type NVML interface {
	// Init loads and initializes the library. An error that wraps
	// ErrNVMLNotFound means libnvidia-ml is absent (or gorun was built
	// without cgo).
	Init() error
	// DeviceCount returns the number of GPUs.
	DeviceCount() (int, error)
	// Device describes GPU i, 0 <= i < DeviceCount().
	Device(i int) (GPUInfo, error)
	// P2PStatus returns the peer-to-peer read status between GPUs i and
	// j as nvidia-smi topo -p2p r prints it ("OK", "CNS", "GNS", "TNS",
	// "NS", "U", ...).
	P2PStatus(i, j int) (string, error)
	// Shutdown releases the library; only after a successful Init.
	Shutdown() error
}

// ErrNVMLNotFound is wrapped by NVML.Init when libnvidia-ml cannot be
// loaded (NVML's ERROR_LIBRARY_NOT_FOUND) or gorun was built without cgo.
var ErrNVMLNotFound = errors.New("NVML library (libnvidia-ml.so.1) not found")

// ErrNoCgo is wrapped, with ErrNVMLNotFound, by the Init of a gorun built
// without cgo (a static build), which cannot load NVML.
var ErrNoCgo = errors.New("this gorun is a static build (without cgo), which cannot load NVML")

// GPUInfo is what NVML says about one GPU.
type GPUInfo struct {
	// Index is NVML's device index.
	Index int `json:"index"`
	// UUID is the GPU's UUID ("GPU-...").
	UUID string `json:"uuid"`
	// BusID is the PCI bus ID as NVML gives it ("00000000:1B:00.0");
	// discovery normalizes it.
	BusID string `json:"bus_id"`
	// NUMA is the NUMA node NVML reports, -1 when it reports none (NVML
	// answers only on some platforms; sysfs fills the gap).
	NUMA int `json:"numa"`
	// CPUAffinity is the CPUs NVML reports as close to the GPU.
	CPUAffinity CPUSet `json:"cpu_affinity"`
	// MemoryBytes is the total framebuffer memory.
	MemoryBytes uint64 `json:"memory_bytes"`
	// MIG reports whether MIG mode is currently enabled.
	MIG bool `json:"mig"`
	// NVLinks groups the GPU's active NVLinks by the device at their
	// other end.
	NVLinks []NVLinkInfo `json:"nvlinks,omitempty"`
}

// NVLink remote device types, as NVML names them.
const (
	NVLinkRemoteGPU    = "gpu"
	NVLinkRemoteSwitch = "switch"
	NVLinkRemoteNPU    = "ibmnpu"
)

// NVLinkInfo counts a GPU's active NVLinks to one remote device.
type NVLinkInfo struct {
	// RemoteBusID is the remote device's PCI bus ID.
	RemoteBusID string `json:"remote_bus_id"`
	// RemoteType is NVLinkRemoteGPU, NVLinkRemoteSwitch or NVLinkRemoteNPU.
	RemoteType string `json:"remote_type"`
	// Links is the number of active links to that device.
	Links int `json:"links"`
}

// NormalizeBusID turns a PCI bus ID as NVML or sysfs writes it
// ("00000000:1B:00.0", "0000:1b:00.0") into sysfs's form: lower case,
// four-digit domain when the domain fits.
func NormalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(strings.TrimRight(id, "\x00")))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return id
	}
	dom = strings.TrimLeft(dom, "0")
	if len(dom) < 4 {
		dom = strings.Repeat("0", 4-len(dom)) + dom
	}
	return dom + ":" + rest
}
