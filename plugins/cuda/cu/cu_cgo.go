//go:build cgo && linux

package cu

/*
#cgo LDFLAGS: -ldl
// The few CUDA driver API functions gorun's CUDA plugin uses, called
// through pointers that gorun_cu_open takes from the library with dlopen
// and dlsym: the plugin builds without CUDA's headers or libraries, and
// loads libcuda.so.1, or a fake driver for tests, at run time.

#include "cuabi.h"

// Attributes (CUdevice_attribute) and flags used.
enum {
	GORUN_CU_ATTR_PCI_BUS_ID = 33,
	GORUN_CU_ATTR_PCI_DEVICE_ID = 34,
	GORUN_CU_ATTR_PCI_DOMAIN_ID = 50,
	GORUN_CU_IPC_LAZY_ENABLE_PEER_ACCESS = 1,
};

// gorun_cu_open loads the driver at path and resolves every function;
// it returns NULL, or a message naming what failed (static storage, or
// dlerror's).
const char *gorun_cu_open(const char *path);

CUresult gorun_cuInit(void);
CUresult gorun_cuDriverGetVersion(int *v);
CUresult gorun_cuDeviceGetCount(int *n);
CUresult gorun_cuDeviceGet(CUdevice *d, int ordinal);
CUresult gorun_cuDeviceGetName(char *name, int len, CUdevice d);
CUresult gorun_cuDeviceTotalMem(size_t *bytes, CUdevice d);
CUresult gorun_cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult gorun_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult gorun_cuDevicePrimaryCtxRelease(CUdevice d);
const char *gorun_cuErrorName(CUresult r);
const char *gorun_cuErrorString(CUresult r);

// The calls below make ctx current on the calling thread first: Go moves
// goroutines between threads, and a driver context is per thread.
CUresult gorun_cuMemAlloc(CUcontext ctx, CUdeviceptr *p, size_t n);
CUresult gorun_cuMemFree(CUcontext ctx, CUdeviceptr p);
CUresult gorun_cuMemcpyHtoD(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n);
CUresult gorun_cuMemcpyDtoH(CUcontext ctx, void *dst, CUdeviceptr src, size_t n);
CUresult gorun_cuMemcpyDtoD(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult gorun_cuIpcGetMemHandle(CUcontext ctx, CUipcMemHandle *h, CUdeviceptr p);
CUresult gorun_cuIpcOpenMemHandle(CUcontext ctx, CUdeviceptr *p, const CUipcMemHandle *h);
CUresult gorun_cuIpcCloseMemHandle(CUcontext ctx, CUdeviceptr p);
CUresult gorun_cuModuleLoadData(CUcontext ctx, CUmodule *m, const char *image);
CUresult gorun_cuModuleGetFunction(CUcontext ctx, CUfunction *f, CUmodule m, const char *name);
CUresult gorun_cuModuleUnload(CUcontext ctx, CUmodule m);
// gorun_launch3 launches f, a kernel of three parameters (two device
// pointers and a count), on grid x block threads, and waits for it.
CUresult gorun_launch3(CUcontext ctx, CUfunction f, unsigned grid, unsigned block, CUdeviceptr a, CUdeviceptr b, unsigned long long n);

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
} fn;

static char errbuf[512];

// sym resolves the first of names (a versioned name, then older ones)
// that the library has.
static void *sym(void *lib, const char *const *names) {
	for (; *names; names++) {
		void *p = dlsym(lib, *names);
		if (p)
			return p;
	}
	return NULL;
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define RESOLVE(field, ...)                                                              \
	do {                                                                             \
		*(void **)&fn.field = sym(lib, NAMES(__VA_ARGS__));                           \
		if (!fn.field) {                                                         \
			snprintf(errbuf, sizeof errbuf, "%s: no function %s", path, #field); \
			return errbuf;                                                   \
		}                                                                        \
	} while (0)

const char *gorun_cu_open(const char *path) {
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(errbuf, sizeof errbuf, "%s", e ? e : "dlopen failed");
		return errbuf;
	}
	RESOLVE(cuInit, "cuInit");
	RESOLVE(cuDriverGetVersion, "cuDriverGetVersion");
	RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
	RESOLVE(cuDeviceGet, "cuDeviceGet");
	RESOLVE(cuDeviceGetName, "cuDeviceGetName");
	RESOLVE(cuDeviceTotalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem");
	RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
	RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent");
	RESOLVE(cuCtxSynchronize, "cuCtxSynchronize");
	RESOLVE(cuGetErrorName, "cuGetErrorName");
	RESOLVE(cuGetErrorString, "cuGetErrorString");
	RESOLVE(cuMemAlloc, "cuMemAlloc_v2");
	RESOLVE(cuMemFree, "cuMemFree_v2");
	RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	RESOLVE(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
	RESOLVE(cuIpcGetMemHandle, "cuIpcGetMemHandle");
	RESOLVE(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle");
	RESOLVE(cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
	RESOLVE(cuModuleLoadData, "cuModuleLoadData");
	RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
	RESOLVE(cuModuleUnload, "cuModuleUnload");
	RESOLVE(cuLaunchKernel, "cuLaunchKernel");
	return NULL;
}

CUresult gorun_cuInit(void) { return fn.cuInit(0); }
CUresult gorun_cuDriverGetVersion(int *v) { return fn.cuDriverGetVersion(v); }
CUresult gorun_cuDeviceGetCount(int *n) { return fn.cuDeviceGetCount(n); }
CUresult gorun_cuDeviceGet(CUdevice *d, int ordinal) { return fn.cuDeviceGet(d, ordinal); }
CUresult gorun_cuDeviceGetName(char *name, int len, CUdevice d) { return fn.cuDeviceGetName(name, len, d); }
CUresult gorun_cuDeviceTotalMem(size_t *bytes, CUdevice d) { return fn.cuDeviceTotalMem(bytes, d); }
CUresult gorun_cuDeviceGetAttribute(int *v, int attr, CUdevice d) { return fn.cuDeviceGetAttribute(v, attr, d); }
CUresult gorun_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return fn.cuDevicePrimaryCtxRetain(c, d); }
CUresult gorun_cuDevicePrimaryCtxRelease(CUdevice d) { return fn.cuDevicePrimaryCtxRelease(d); }

const char *gorun_cuErrorName(CUresult r) {
	const char *s = NULL;
	if (fn.cuGetErrorName(r, &s) != 0 || !s)
		return "CUDA_ERROR_UNKNOWN";
	return s;
}

const char *gorun_cuErrorString(CUresult r) {
	const char *s = NULL;
	if (fn.cuGetErrorString(r, &s) != 0 || !s)
		return "unknown error";
	return s;
}

#define WITH(ctx, call)                                 \
	do {                                            \
		CUresult r_ = fn.cuCtxSetCurrent(ctx); \
		if (r_ != 0)                            \
			return r_;                      \
		return call;                            \
	} while (0)

CUresult gorun_cuMemAlloc(CUcontext ctx, CUdeviceptr *p, size_t n) { WITH(ctx, fn.cuMemAlloc(p, n)); }
CUresult gorun_cuMemFree(CUcontext ctx, CUdeviceptr p) { WITH(ctx, fn.cuMemFree(p)); }
CUresult gorun_cuMemcpyHtoD(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n) { WITH(ctx, fn.cuMemcpyHtoD(dst, src, n)); }
CUresult gorun_cuMemcpyDtoH(CUcontext ctx, void *dst, CUdeviceptr src, size_t n) { WITH(ctx, fn.cuMemcpyDtoH(dst, src, n)); }
CUresult gorun_cuMemcpyDtoD(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n) { WITH(ctx, fn.cuMemcpyDtoD(dst, src, n)); }
CUresult gorun_cuIpcGetMemHandle(CUcontext ctx, CUipcMemHandle *h, CUdeviceptr p) { WITH(ctx, fn.cuIpcGetMemHandle(h, p)); }
CUresult gorun_cuIpcOpenMemHandle(CUcontext ctx, CUdeviceptr *p, const CUipcMemHandle *h) {
	WITH(ctx, fn.cuIpcOpenMemHandle(p, *h, GORUN_CU_IPC_LAZY_ENABLE_PEER_ACCESS));
}
CUresult gorun_cuIpcCloseMemHandle(CUcontext ctx, CUdeviceptr p) { WITH(ctx, fn.cuIpcCloseMemHandle(p)); }
CUresult gorun_cuModuleLoadData(CUcontext ctx, CUmodule *m, const char *image) { WITH(ctx, fn.cuModuleLoadData(m, image)); }
CUresult gorun_cuModuleGetFunction(CUcontext ctx, CUfunction *f, CUmodule m, const char *name) { WITH(ctx, fn.cuModuleGetFunction(f, m, name)); }
CUresult gorun_cuModuleUnload(CUcontext ctx, CUmodule m) { WITH(ctx, fn.cuModuleUnload(m)); }

CUresult gorun_launch3(CUcontext ctx, CUfunction f, unsigned grid, unsigned block, CUdeviceptr a, CUdeviceptr b, unsigned long long n) {
	CUresult r = fn.cuCtxSetCurrent(ctx);
	if (r != 0)
		return r;
	void *params[] = {&a, &b, &n};
	r = fn.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
	if (r != 0)
		return r;
	return fn.cuCtxSynchronize();
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

var loaded struct {
	once sync.Once
	path string
	err  error
	drv  *Driver
}

// Driver is the loaded CUDA driver. A process loads one: Open with
// another path afterwards is an error.
type Driver struct {
	// Path is the library loaded.
	Path string
	// Version is the driver's CUDA version (12040 for 12.4).
	Version int
}

// Open loads the CUDA driver at path ("" means $GORUN_CUDA_DRIVER, else
// DefaultDriver) and initializes it. The error says which library could
// not be loaded or lacks which function, or what cuInit said (on a
// machine without an NVIDIA GPU or driver, for one).
func Open(path string) (*Driver, error) {
	if path == "" {
		path = os.Getenv(EnvDriver)
	}
	if path == "" {
		path = DefaultDriver
	}
	loaded.once.Do(func() {
		loaded.path = path
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		if msg := C.gorun_cu_open(cpath); msg != nil {
			loaded.err = fmt.Errorf("cu: loading the CUDA driver: %s", C.GoString(msg))
			return
		}
		if err := check("cuInit", C.gorun_cuInit()); err != nil {
			loaded.err = fmt.Errorf("cu: %s: %w", path, err)
			return
		}
		var v C.int
		if err := check("cuDriverGetVersion", C.gorun_cuDriverGetVersion(&v)); err != nil {
			loaded.err = fmt.Errorf("cu: %s: %w", path, err)
			return
		}
		loaded.drv = &Driver{Path: path, Version: int(v)}
	})
	if loaded.err != nil {
		return nil, loaded.err
	}
	if path != loaded.path {
		return nil, fmt.Errorf("cu: the CUDA driver %s is loaded; cannot load %s too", loaded.path, path)
	}
	return loaded.drv, nil
}

// check turns a CUresult into an *Error, or nil.
func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.gorun_cuErrorName(r)), Text: C.GoString(C.gorun_cuErrorString(r))}
}

// Devices lists the GPUs the driver sees.
func (d *Driver) Devices() ([]Device, error) {
	var n C.int
	if err := check("cuDeviceGetCount", C.gorun_cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, int(n))
	for i := range int(n) {
		var dev C.CUdevice
		if err := check("cuDeviceGet", C.gorun_cuDeviceGet(&dev, C.int(i))); err != nil {
			return nil, err
		}
		var name [256]C.char
		if err := check("cuDeviceGetName", C.gorun_cuDeviceGetName(&name[0], C.int(len(name)), dev)); err != nil {
			return nil, err
		}
		var mem C.size_t
		if err := check("cuDeviceTotalMem", C.gorun_cuDeviceTotalMem(&mem, dev)); err != nil {
			return nil, err
		}
		var pci [3]C.int
		for j, attr := range []C.int{C.GORUN_CU_ATTR_PCI_DOMAIN_ID, C.GORUN_CU_ATTR_PCI_BUS_ID, C.GORUN_CU_ATTR_PCI_DEVICE_ID} {
			if err := check("cuDeviceGetAttribute", C.gorun_cuDeviceGetAttribute(&pci[j], attr, dev)); err != nil {
				return nil, err
			}
		}
		out = append(out, Device{
			Ordinal: i,
			Name:    C.GoString(&name[0]),
			PCI:     fmt.Sprintf("%04x:%02x:%02x.0", int(pci[0]), int(pci[1]), int(pci[2])),
			Memory:  uint64(mem),
		})
	}
	return out, nil
}

// Context is a GPU's primary context, as this process uses it, with the
// reduction kernels loaded on first use. Its methods may be called from
// several goroutines.
type Context struct {
	// Ordinal is the GPU's.
	Ordinal int
	dev     C.CUdevice
	ctx     C.CUcontext

	mu     sync.Mutex
	mod    C.CUmodule
	kernel map[string]C.CUfunction
}

// Context retains the primary context of GPU ordinal.
func (d *Driver) Context(ordinal int) (*Context, error) {
	var dev C.CUdevice
	if err := check("cuDeviceGet", C.gorun_cuDeviceGet(&dev, C.int(ordinal))); err != nil {
		return nil, fmt.Errorf("cu: GPU %d: %w", ordinal, err)
	}
	var ctx C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.gorun_cuDevicePrimaryCtxRetain(&ctx, dev)); err != nil {
		return nil, fmt.Errorf("cu: GPU %d: %w", ordinal, err)
	}
	return &Context{Ordinal: ordinal, dev: dev, ctx: ctx}, nil
}

// Close unloads the kernels and releases the primary context.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mod != nil {
		C.gorun_cuModuleUnload(c.ctx, c.mod)
		c.mod, c.kernel = nil, nil
	}
	return c.err("cuDevicePrimaryCtxRelease", C.gorun_cuDevicePrimaryCtxRelease(c.dev))
}

func (c *Context) err(call string, r C.CUresult) error {
	if err := check(call, r); err != nil {
		return fmt.Errorf("cu: GPU %d: %w", c.Ordinal, err)
	}
	return nil
}

// Alloc allocates n bytes of device memory.
func (c *Context) Alloc(n int) (Ptr, error) {
	var p C.CUdeviceptr
	if err := c.err("cuMemAlloc", C.gorun_cuMemAlloc(c.ctx, &p, C.size_t(n))); err != nil {
		return 0, err
	}
	return Ptr(p), nil
}

// Free frees memory Alloc returned.
func (c *Context) Free(p Ptr) error {
	return c.err("cuMemFree", C.gorun_cuMemFree(c.ctx, C.CUdeviceptr(p)))
}

// CopyToDevice copies src to device memory at dst.
func (c *Context) CopyToDevice(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.err("cuMemcpyHtoD", C.gorun_cuMemcpyHtoD(c.ctx, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// CopyFromDevice copies device memory at src to dst.
func (c *Context) CopyFromDevice(dst []byte, src Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.err("cuMemcpyDtoH", C.gorun_cuMemcpyDtoH(c.ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}

// Copy copies n bytes between device addresses (of this GPU, or memory
// of another opened with OpenIpc: over NVLink or PCIe peer to peer).
func (c *Context) Copy(dst, src Ptr, n int) error {
	if n == 0 {
		return nil
	}
	return c.err("cuMemcpyDtoD", C.gorun_cuMemcpyDtoD(c.ctx, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)))
}

// IpcHandle returns the handle by which another process maps the
// allocation at p (an address Alloc returned).
func (c *Context) IpcHandle(p Ptr) (IpcHandle, error) {
	var h C.CUipcMemHandle
	if err := c.err("cuIpcGetMemHandle", C.gorun_cuIpcGetMemHandle(c.ctx, &h, C.CUdeviceptr(p))); err != nil {
		return IpcHandle{}, err
	}
	var out IpcHandle
	copy(out[:], C.GoBytes(unsafe.Pointer(&h), C.int(len(out))))
	return out, nil
}

// OpenIpc maps the allocation another process's IpcHandle names, and
// returns its address here. (CUDA refuses a handle made by the same
// process.)
func (c *Context) OpenIpc(h IpcHandle) (Ptr, error) {
	var ch C.CUipcMemHandle
	C.memcpy(unsafe.Pointer(&ch), unsafe.Pointer(&h[0]), C.size_t(len(h)))
	var p C.CUdeviceptr
	if err := c.err("cuIpcOpenMemHandle", C.gorun_cuIpcOpenMemHandle(c.ctx, &p, &ch)); err != nil {
		return 0, err
	}
	return Ptr(p), nil
}

// CloseIpc unmaps memory OpenIpc mapped.
func (c *Context) CloseIpc(p Ptr) error {
	return c.err("cuIpcCloseMemHandle", C.gorun_cuIpcCloseMemHandle(c.ctx, C.CUdeviceptr(p)))
}

// Reduce sets dst[i] = op(dst[i], src[i]) for the count elements of
// dtype at dst and src, on the GPU, and waits for it. op is "sum", "min"
// or "max"; dtype "float32", "float16" or "bfloat16".
func (c *Context) Reduce(op, dtype string, dst, src Ptr, count int) error {
	name, _, ok := kernelName(op, dtype)
	if !ok {
		return fmt.Errorf("cu: no reduction %s on %s (ops %v, types %v)", op, dtype, Ops, DTypes)
	}
	if count == 0 {
		return nil
	}
	f, err := c.function(name)
	if err != nil {
		return err
	}
	const block = 256
	grid := min((count+block-1)/block, 65535)
	return c.err("cuLaunchKernel "+name, C.gorun_launch3(c.ctx, f, C.uint(grid), block, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.ulonglong(count)))
}

// function returns the kernel name, loading the module on first use.
func (c *Context) function(name string) (C.CUfunction, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mod == nil {
		image := C.CString(PTX())
		defer C.free(unsafe.Pointer(image))
		var mod C.CUmodule
		if err := c.err("cuModuleLoadData", C.gorun_cuModuleLoadData(c.ctx, &mod, image)); err != nil {
			return nil, err
		}
		c.mod, c.kernel = mod, map[string]C.CUfunction{}
	}
	if f, ok := c.kernel[name]; ok {
		return f, nil
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.CUfunction
	if err := c.err("cuModuleGetFunction "+name, C.gorun_cuModuleGetFunction(c.ctx, &f, c.mod, cname)); err != nil {
		return nil, err
	}
	c.kernel[name] = f
	return f, nil
}
