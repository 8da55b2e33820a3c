// Package cu calls the CUDA driver API for gorun's CUDA plugin: devices,
// device memory, copies, CUDA IPC handles (device memory another process
// of the same machine can map) and the element-wise reductions the
// collectives need, run on the GPU from PTX text (kernels.go) that the
// driver compiles at load time, so that no CUDA compiler is needed.
//
// The driver, libcuda.so.1, is opened at run time with dlopen, and the
// few functions used are declared here: the package builds (with cgo) on
// a machine without CUDA, and a build without cgo has every function fail
// with [ErrUnavailable]. GORUN_CUDA_DRIVER ([EnvDriver]) names another
// library with the same functions: plugins/cuda/fakecuda is one, over host
// memory, which the tests use where there is no GPU.
//
// A driver context is current per thread, and Go moves goroutines between
// threads: every call that needs a context makes it current inside the
// same C call.
package cu
