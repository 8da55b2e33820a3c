//go:build cgo && linux

package nvmllib

import (
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/topology"
)

// New returns the NVML library, loaded from libnvidia-ml.so.1 by Init.
func New() topology.NVML { return &realNVML{} }

// realNVML calls go-nvml. It never calls the library after a failed
// Init (Shutdown then kills the process), and never asks the library
// to name an error code.
type realNVML struct {
	mu      sync.Mutex
	inited  bool
	devices map[int]nvml.Device
}

func (r *realNVML) Init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inited {
		return nil
	}
	ret := nvml.Init()
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return fmt.Errorf("NVML Init: %w", topology.ErrNVMLNotFound)
	}
	if ret != nvml.SUCCESS {
		return &nvmlError{"Init", int(ret)}
	}
	r.inited = true
	r.devices = map[int]nvml.Device{}
	return nil
}

var errNotInited = errors.New("NVML not initialized")

func (r *realNVML) device(i int) (nvml.Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inited {
		return nil, errNotInited
	}
	if d, ok := r.devices[i]; ok {
		return d, nil
	}
	d, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, &nvmlError{fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), int(ret)}
	}
	r.devices[i] = d
	return d, nil
}

func (r *realNVML) DeviceCount() (int, error) {
	r.mu.Lock()
	inited := r.inited
	r.mu.Unlock()
	if !inited {
		return 0, errNotInited
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, &nvmlError{"DeviceGetCount", int(ret)}
	}
	return n, nil
}

func busIDString(b [32]int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func (r *realNVML) Device(i int) (topology.GPUInfo, error) {
	d, err := r.device(i)
	if err != nil {
		return topology.GPUInfo{}, err
	}
	info := topology.GPUInfo{Index: i, NUMA: -1}
	var ret nvml.Return
	if info.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return info, &nvmlError{fmt.Sprintf("DeviceGetUUID(%d)", i), int(ret)}
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return info, &nvmlError{fmt.Sprintf("DeviceGetPciInfo(%d)", i), int(ret)}
	}
	info.BusID = busIDString(pci.BusId)
	if numa, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
		info.NUMA = numa
	}
	// GetCpuAffinity takes a CPU count and asks for enough 64-bit words.
	if words, ret := d.GetCpuAffinity(topology.MaxCPUs); ret == nvml.SUCCESS {
		for w, bits := range words {
			for b := 0; b < 64; b++ {
				if bits&(1<<uint(b)) != 0 && w*64+b < topology.MaxCPUs {
					info.CPUAffinity.Add(w*64 + b)
				}
			}
		}
	}
	if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		info.MemoryBytes = mem.Total
	}
	if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
		info.MIG = cur == nvml.DEVICE_MIG_ENABLE
	}
	byRemote := map[string]int{}
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		st, ret := d.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			if ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_NOT_SUPPORTED {
				break
			}
			continue
		}
		if st != nvml.FEATURE_ENABLED {
			continue
		}
		rp, ret := d.GetNvLinkRemotePciInfo(l)
		if ret != nvml.SUCCESS {
			continue
		}
		typ := topology.NVLinkRemoteGPU
		if t, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
			switch t {
			case nvml.NVLINK_DEVICE_TYPE_SWITCH:
				typ = topology.NVLinkRemoteSwitch
			case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
				typ = topology.NVLinkRemoteNPU
			}
		}
		id := busIDString(rp.BusId)
		k := typ + " " + id
		if byRemote[k] == 0 {
			info.NVLinks = append(info.NVLinks, topology.NVLinkInfo{RemoteBusID: id, RemoteType: typ})
		}
		byRemote[k]++
	}
	for j := range info.NVLinks {
		info.NVLinks[j].Links = byRemote[info.NVLinks[j].RemoteType+" "+info.NVLinks[j].RemoteBusID]
	}
	return info, nil
}

func (r *realNVML) P2PStatus(i, j int) (string, error) {
	a, err := r.device(i)
	if err != nil {
		return "", err
	}
	b, err := r.device(j)
	if err != nil {
		return "", err
	}
	st, ret := a.GetP2PStatus(b, nvml.P2P_CAPS_INDEX_READ)
	if ret != nvml.SUCCESS {
		return "", &nvmlError{fmt.Sprintf("DeviceGetP2PStatus(%d, %d)", i, j), int(ret)}
	}
	return p2pStatusName(int(st)), nil
}

func (r *realNVML) Shutdown() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inited {
		return nil // never call the library after a failed (or no) Init
	}
	r.inited = false
	r.devices = nil
	if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
		return &nvmlError{"Shutdown", int(ret)}
	}
	return nil
}

// Available says whether this build can load NVML: it was built with cgo.
const Available = true

// p2pStatusName names NVML's GpuP2PStatus values as nvidia-smi does.
func p2pStatusName(v int) string {
	switch v {
	case 0:
		return "OK"
	case 1:
		return "CNS"
	case 2:
		return "GNS"
	case 3:
		return "TNS"
	case 4:
		return "DR"
	case 5:
		return "NS"
	default:
		return "U"
	}
}

// nvmlError is a failed NVML call, by name and return code; it does not
// call into the library to name the code.
type nvmlError struct {
	call string
	code int
}

func (e *nvmlError) Error() string { return fmt.Sprintf("NVML %s: return code %d", e.call, e.code) }
