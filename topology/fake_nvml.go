package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
)

// FakeNVML is an NVML served from a recorded description of a machine,
// for tests: go-nvml's own mocks carry no topology.
type FakeNVML struct {
	// InitError, when set, makes Init fail; "library not found" makes it
	// fail with ErrNVMLNotFound.
	InitError string `json:"init_error,omitempty"`
	// GPUs are the devices, in NVML index order.
	GPUs []GPUInfo `json:"gpus"`
	// P2P is the peer-to-peer status of every pair not in P2PPairs
	// ("OK" when empty).
	P2P string `json:"p2p,omitempty"`
	// P2PPairs overrides P2P for pairs "i,j".
	P2PPairs map[string]string `json:"p2p_pairs,omitempty"`

	inited bool
	calls  []string
}

// LoadFakeNVML reads a FakeNVML from the JSON file name in fsys.
func LoadFakeNVML(fsys fs.FS, name string) (*FakeNVML, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("fake NVML: %w", err)
	}
	var f FakeNVML
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("fake NVML %s: %w", name, err)
	}
	return &f, nil
}

// Calls lists the methods called so far, in order.
func (f *FakeNVML) Calls() []string { return append([]string(nil), f.calls...) }

var errFakeAfterFailedInit = errors.New("fake NVML: called after a failed or missing Init")

func (f *FakeNVML) check(call string) error {
	f.calls = append(f.calls, call)
	if !f.inited {
		return errFakeAfterFailedInit
	}
	return nil
}

// Init fails as InitError says, or succeeds.
func (f *FakeNVML) Init() error {
	f.calls = append(f.calls, "Init")
	switch f.InitError {
	case "":
		f.inited = true
		return nil
	case "library not found":
		return fmt.Errorf("fake NVML Init: %w", ErrNVMLNotFound)
	default:
		return fmt.Errorf("fake NVML Init: %s", f.InitError)
	}
}

// DeviceCount returns len(GPUs).
func (f *FakeNVML) DeviceCount() (int, error) {
	if err := f.check("DeviceCount"); err != nil {
		return 0, err
	}
	return len(f.GPUs), nil
}

// Device returns GPUs[i] with its Index set to i.
func (f *FakeNVML) Device(i int) (GPUInfo, error) {
	if err := f.check("Device"); err != nil {
		return GPUInfo{}, err
	}
	if i < 0 || i >= len(f.GPUs) {
		return GPUInfo{}, fmt.Errorf("fake NVML: no device %d", i)
	}
	g := f.GPUs[i]
	g.Index = i
	return g, nil
}

// P2PStatus returns P2PPairs["i,j"], else P2P, else "OK".
func (f *FakeNVML) P2PStatus(i, j int) (string, error) {
	if err := f.check("P2PStatus"); err != nil {
		return "", err
	}
	if s, ok := f.P2PPairs[fmt.Sprintf("%d,%d", i, j)]; ok {
		return s, nil
	}
	if f.P2P != "" {
		return f.P2P, nil
	}
	return "OK", nil
}

// Shutdown ends a successful Init.
func (f *FakeNVML) Shutdown() error {
	if err := f.check("Shutdown"); err != nil {
		return err
	}
	f.inited = false
	return nil
}
