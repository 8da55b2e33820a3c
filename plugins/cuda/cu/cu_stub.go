//go:build !cgo || !linux

package cu

// Driver is the loaded CUDA driver; this build cannot load one.
type Driver struct {
	Path    string
	Version int
}

// Open fails with ErrUnavailable: this build has no cgo.
func Open(path string) (*Driver, error) { return nil, ErrUnavailable }

// Devices fails with ErrUnavailable.
func (d *Driver) Devices() ([]Device, error) { return nil, ErrUnavailable }

// Context is a GPU's primary context; this build has none.
type Context struct{ Ordinal int }

// Context fails with ErrUnavailable.
func (d *Driver) Context(ordinal int) (*Context, error) { return nil, ErrUnavailable }

// Close does nothing.
func (c *Context) Close() error { return nil }

// Alloc fails with ErrUnavailable.
func (c *Context) Alloc(n int) (Ptr, error) { return 0, ErrUnavailable }

// Free fails with ErrUnavailable.
func (c *Context) Free(p Ptr) error { return ErrUnavailable }

// CopyToDevice fails with ErrUnavailable.
func (c *Context) CopyToDevice(dst Ptr, src []byte) error { return ErrUnavailable }

// CopyFromDevice fails with ErrUnavailable.
func (c *Context) CopyFromDevice(dst []byte, src Ptr) error { return ErrUnavailable }

// Copy fails with ErrUnavailable.
func (c *Context) Copy(dst, src Ptr, n int) error { return ErrUnavailable }

// IpcHandle fails with ErrUnavailable.
func (c *Context) IpcHandle(p Ptr) (IpcHandle, error) { return IpcHandle{}, ErrUnavailable }

// OpenIpc fails with ErrUnavailable.
func (c *Context) OpenIpc(h IpcHandle) (Ptr, error) { return 0, ErrUnavailable }

// CloseIpc fails with ErrUnavailable.
func (c *Context) CloseIpc(p Ptr) error { return ErrUnavailable }

// Reduce fails with ErrUnavailable.
func (c *Context) Reduce(op, dtype string, dst, src Ptr, count int) error { return ErrUnavailable }
