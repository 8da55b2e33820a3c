// Command gorun-plugin-cuda is gorun's device plugin for NVIDIA GPUs: it
// gives a rank memory on its GPU (gorun's DeviceBuffer), which the rank
// fills and reads through the plugin, and on which gorun's device
// collectives run: the GPUs of a host reach each other's buffers through
// CUDA IPC (over NVLink where the GPUs have peer access, PCIe otherwise),
// and reduce on the GPU with the PTX kernels of package cu.
//
// It loads libcuda.so.1 at run time (GORUN_CUDA_DRIVER names another
// driver library, such as the fake one in fakecuda for tests), so it
// builds without CUDA; built without cgo it cannot load a driver and says
// so when started.
//
// A rank uses GPU LOCAL_RANK modulo the GPUs it sees (gorun's binding
// sets CUDA_VISIBLE_DEVICES), or the one the "device" option names
// (--plugin-opt device=N).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gorun/gorun/plugins/cuda/cu"
	"github.com/gorun/gorun/plugins/sdk"
)

func main() {
	sdk.Serve(sdk.Plugin{
		Name:        "cuda",
		Version:     "0.1.0",
		Description: "NVIDIA GPU memory and device collectives (CUDA IPC, reductions on the GPU)",
		Memory:      newMemory,
	})
}

// memory is the sdk.Memory of one rank: its GPU's primary context and
// what it allocated and imported there.
type memory struct {
	drv *cu.Driver
	ctx *cu.Context

	mu   sync.Mutex
	held map[uint64]block // what this rank allocated or imported, by pointer
}

// block is an allocation of this rank's (imported false: its size is
// known) or a mapping of another rank's (whose bounds the driver checks).
type block struct {
	size     int
	imported bool
}

func newMemory(cfg sdk.Config) (sdk.Memory, error) {
	drv, err := cu.Open("")
	if err != nil {
		return nil, err
	}
	devs, err := drv.Devices()
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("the CUDA driver (%s) sees no GPU (CUDA_VISIBLE_DEVICES=%q)", drv.Path, os.Getenv("CUDA_VISIBLE_DEVICES"))
	}
	ordinal, err := pickDevice(cfg, len(devs))
	if err != nil {
		return nil, err
	}
	ctx, err := drv.Context(ordinal)
	if err != nil {
		return nil, err
	}
	if cfg.Logger != nil {
		cfg.Logger.Debug("GPU chosen", "ordinal", ordinal, "name", devs[ordinal].Name, "pci", devs[ordinal].PCI)
	}
	return &memory{drv: drv, ctx: ctx, held: map[uint64]block{}}, nil
}

// pickDevice returns the "device" option, else the rank's local rank
// modulo n (0 outside a job).
func pickDevice(cfg sdk.Config, n int) (int, error) {
	if v, ok := cfg.Options["device"]; ok {
		d, err := strconv.Atoi(v)
		if err != nil || d < 0 || d >= n {
			return 0, fmt.Errorf("option device=%q: want a GPU from 0 to %d", v, n-1)
		}
		return d, nil
	}
	return max(cfg.LocalRank, 0) % n, nil
}

// Devices lists the GPUs, marking the rank's.
func (m *memory) Devices(context.Context) ([]sdk.Device, error) {
	devs, err := m.drv.Devices()
	if err != nil {
		return nil, err
	}
	out := make([]sdk.Device, len(devs))
	for i, d := range devs {
		note := fmt.Sprintf("%.0f GiB", float64(d.Memory)/(1<<30))
		if i == m.ctx.Ordinal {
			note += ", selected"
		}
		out[i] = sdk.Device{Name: fmt.Sprintf("cuda%d", i), Provider: d.Name, PCI: d.PCI, NUMA: numaOf(d.PCI), Note: note}
	}
	return out, nil
}

// numaOf reads the NUMA node of a PCI device from sysfs, or -1.
func numaOf(pci string) int {
	b, err := os.ReadFile("/sys/bus/pci/devices/" + strings.ToLower(pci) + "/numa_node")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

func (m *memory) Alloc(bytes int) (uint64, error) {
	p, err := m.ctx.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	m.held[uint64(p)] = block{size: bytes}
	m.mu.Unlock()
	return uint64(p), nil
}

func (m *memory) Free(p uint64) error {
	m.mu.Lock()
	b, ok := m.held[p]
	delete(m.held, p)
	m.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("cuda: free of %#x, which is neither allocated nor imported here", p)
	case b.imported:
		return m.ctx.CloseIpc(cu.Ptr(p))
	}
	return m.ctx.Free(cu.Ptr(p))
}

// span checks that n bytes at p+off lie in an allocation of this rank's,
// when p is one (imports are checked by the driver).
func (m *memory) span(p uint64, off, n int) error {
	m.mu.Lock()
	b, ok := m.held[p]
	m.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("cuda: %#x is neither allocated nor imported here", p)
	case off < 0 || n < 0 || (!b.imported && off+n > b.size):
		return fmt.Errorf("cuda: %d bytes at offset %d of a %d-byte allocation", n, off, b.size)
	}
	return nil
}

func (m *memory) Write(p uint64, off int, src []byte) error {
	if err := m.span(p, off, len(src)); err != nil {
		return err
	}
	return m.ctx.CopyToDevice(cu.Ptr(p)+cu.Ptr(off), src)
}

func (m *memory) Read(dst []byte, p uint64, off int) error {
	if err := m.span(p, off, len(dst)); err != nil {
		return err
	}
	return m.ctx.CopyFromDevice(dst, cu.Ptr(p)+cu.Ptr(off))
}

func (m *memory) Export(p uint64) ([]byte, error) {
	m.mu.Lock()
	b, ok := m.held[p]
	m.mu.Unlock()
	if !ok || b.imported {
		return nil, fmt.Errorf("cuda: export of %#x, which this rank did not allocate", p)
	}
	h, err := m.ctx.IpcHandle(cu.Ptr(p))
	if err != nil {
		return nil, err
	}
	return h[:], nil
}

func (m *memory) Import(handle []byte) (uint64, error) {
	var h cu.IpcHandle
	if len(handle) != len(h) {
		return 0, fmt.Errorf("cuda: an IPC handle of %d bytes, want %d", len(handle), len(h))
	}
	copy(h[:], handle)
	p, err := m.ctx.OpenIpc(h)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	m.held[uint64(p)] = block{imported: true}
	m.mu.Unlock()
	return uint64(p), nil
}

func (m *memory) Copy(dst uint64, dstOff int, src uint64, srcOff int, bytes int) error {
	if err := m.span(dst, dstOff, bytes); err != nil {
		return err
	}
	if err := m.span(src, srcOff, bytes); err != nil {
		return err
	}
	return m.ctx.Copy(cu.Ptr(dst)+cu.Ptr(dstOff), cu.Ptr(src)+cu.Ptr(srcOff), bytes)
}

func (m *memory) Reduce(op, dtype string, dst uint64, dstOff int, src uint64, srcOff int, count int) error {
	size := map[string]int{"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
	if size == 0 {
		return fmt.Errorf("cuda: reduction on %s: %w (float32, float16 and bfloat16 only)", dtype, sdk.ErrNotSupported)
	}
	if err := m.span(dst, dstOff, count*size); err != nil {
		return err
	}
	if err := m.span(src, srcOff, count*size); err != nil {
		return err
	}
	return m.ctx.Reduce(op, dtype, cu.Ptr(dst)+cu.Ptr(dstOff), cu.Ptr(src)+cu.Ptr(srcOff), count)
}

// Close frees what the rank left and releases the context.
func (m *memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, b := range m.held { // the mappings of others' memory first
		if b.imported {
			m.ctx.CloseIpc(cu.Ptr(p))
		}
	}
	for p, b := range m.held {
		if !b.imported {
			m.ctx.Free(cu.Ptr(p))
		}
	}
	clear(m.held)
	return m.ctx.Close()
}
