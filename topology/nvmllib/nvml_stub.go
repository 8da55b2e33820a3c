//go:build !cgo || !linux

package nvmllib

import (
	"fmt"

	"github.com/gorun/gorun/topology"
)

// New returns the NVML library. gorun was built without cgo (or not for
// Linux), so its Init always fails with topology.ErrNVMLNotFound.
func New() topology.NVML { return stubNVML{} }

type stubNVML struct{}

func (stubNVML) Init() error {
	return fmt.Errorf("NVML Init: %w: %w", topology.ErrNoCgo, topology.ErrNVMLNotFound)
}
func (stubNVML) DeviceCount() (int, error) { return 0, topology.ErrNVMLNotFound }
func (stubNVML) Device(int) (topology.GPUInfo, error) {
	return topology.GPUInfo{}, topology.ErrNVMLNotFound
}
func (stubNVML) P2PStatus(int, int) (string, error) { return "", topology.ErrNVMLNotFound }
func (stubNVML) Shutdown() error                    { return topology.ErrNVMLNotFound }

// Available says whether this build can load NVML: it was built with cgo.
const Available = false
