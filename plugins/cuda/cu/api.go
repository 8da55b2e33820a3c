package cu

import (
	"errors"
	"fmt"
)

// EnvDriver names the CUDA driver library to load instead of
// DefaultDriver: a path, or a name the dynamic loader finds.
const EnvDriver = "GORUN_CUDA_DRIVER"

// DefaultDriver is the NVIDIA driver's CUDA library.
const DefaultDriver = "libcuda.so.1"

// ErrUnavailable is returned by a build without cgo, which cannot load
// the driver.
var ErrUnavailable = errors.New("cu: this build cannot load the CUDA driver (built without cgo)")

// Error is a failed driver call.
type Error struct {
	Call string // the driver function ("cuMemAlloc")
	Code int    // its CUresult
	Name string // "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // "out of memory"
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%s, %d)", e.Call, e.Text, e.Name, e.Code)
}

// OutOfMemory reports whether err is the driver's CUDA_ERROR_OUT_OF_MEMORY.
func OutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == 2
}

// Device describes one GPU as the driver sees it.
type Device struct {
	Ordinal int    // its index in the driver's order (CUDA_VISIBLE_DEVICES applies)
	Name    string // "NVIDIA H200"
	PCI     string // "0000:3b:00.0"
	Memory  uint64 // bytes
}

// Ptr is an address in device memory.
type Ptr uint64

// IpcHandle names device memory for another process of the same machine
// (cuIpcGetMemHandle): 64 opaque bytes.
type IpcHandle [64]byte

// DTypes are the element types the reductions take, and Ops their
// operations.
var (
	DTypes = []string{"float32", "float16", "bfloat16"}
	Ops    = []string{"sum", "min", "max"}
)

// dtypeSuffix names each element type in kernel names, with its size.
var dtypeSuffix = map[string]struct {
	suffix string
	size   int
}{
	"float32":  {"f32", 4},
	"float16":  {"f16", 2},
	"bfloat16": {"bf16", 2},
}

// kernelName returns the kernel of op on dtype, and dtype's size; ok is
// false for a pair the package has no kernel for.
func kernelName(op, dtype string) (name string, size int, ok bool) {
	t, ok := dtypeSuffix[dtype]
	if !ok {
		return "", 0, false
	}
	for _, o := range Ops {
		if o == op {
			return "gorun_" + op + "_" + t.suffix, t.size, true
		}
	}
	return "", 0, false
}
