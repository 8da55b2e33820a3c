//go:build !cgo || !linux

package topology

import "fmt"

// NewNVML returns the NVML library. gorun was built without cgo (or not
// for Linux), so its Init always fails with ErrNVMLNotFound.
func NewNVML() NVML { return stubNVML{} }

type stubNVML struct{}

func (stubNVML) Init() error                        { return fmt.Errorf("NVML Init: %w: %w", ErrNoCgo, ErrNVMLNotFound) }
func (stubNVML) DeviceCount() (int, error)          { return 0, ErrNVMLNotFound }
func (stubNVML) Device(int) (GPUInfo, error)        { return GPUInfo{}, ErrNVMLNotFound }
func (stubNVML) P2PStatus(int, int) (string, error) { return "", ErrNVMLNotFound }
func (stubNVML) Shutdown() error                    { return ErrNVMLNotFound }

// HasNVML says whether this build can load NVML: it was built with cgo.
const HasNVML = false
