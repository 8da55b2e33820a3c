package plugins

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
)

// Memory is a device plugin's memory (a GPU's, for plugins/cuda), as the
// rank uses it: allocations the plugin makes and names by opaque
// pointers, filled and read through the memory the rank shares with the
// plugin, shared with the other ranks of the host (Export, Import), and
// copied and reduced on the device.
type Memory struct {
	c *Client
}

// Memory returns the plugin's device memory; it stays valid until c
// closes.
func (c *Client) Memory() (*Memory, error) {
	if !c.info.Memory {
		return nil, fmt.Errorf("plugin %s (%s): %w: it manages no device memory", c.name, c.path, transport.ErrNotSupported)
	}
	return &Memory{c: c}, nil
}

func (m *Memory) call(ctx context.Context, method string, req *wire.MemReq, reply any) error {
	if err := m.c.lostErr(); err != nil {
		return err
	}
	if err := m.c.ctl.Call(ctx, method, req, reply); err != nil {
		if lost := m.c.lostErr(); lost != nil {
			return lost
		}
		return fmt.Errorf("plugin %s: %s: %w", m.c.name, method, err)
	}
	return nil
}

// Alloc allocates n bytes of device memory.
func (m *Memory) Alloc(ctx context.Context, n int) (uint64, error) {
	var r wire.MemReply
	err := m.call(ctx, "DevAlloc", &wire.MemReq{Bytes: uint64(n)}, &r)
	return r.Ptr, err
}

// Free frees an allocation, or unmaps an import.
func (m *Memory) Free(ctx context.Context, p uint64) error {
	return m.call(ctx, "DevFree", &wire.MemReq{Ptr: p}, &wire.Empty{})
}

// Write copies src to the device memory at p+off.
func (m *Memory) Write(ctx context.Context, p uint64, off int, src []byte) error {
	return m.io(ctx, "DevWrite", p, off, src, true)
}

// Read copies the device memory at p+off into dst.
func (m *Memory) Read(ctx context.Context, dst []byte, p uint64, off int) error {
	return m.io(ctx, "DevRead", p, off, dst, false)
}

// io moves b through memory the plugin maps: b's own region, or a bounce
// buffer.
func (m *Memory) io(ctx context.Context, method string, p uint64, off int, b []byte, in bool) error {
	if len(b) == 0 {
		return nil
	}
	k := Collective{c: m.c}
	ref, bounce, err := k.shared(b, in)
	if err != nil {
		return err
	}
	if bounce != nil {
		defer m.c.bounces.put(bounce)
	}
	if err := m.call(ctx, method, &wire.MemReq{Ptr: p, Off: uint64(off), Ref: ref}, &wire.Empty{}); err != nil {
		return err
	}
	if bounce != nil && !in {
		copy(b, bounce.Bytes())
	}
	return nil
}

// Export returns the handle by which another rank's plugin on this host
// maps the allocation p.
func (m *Memory) Export(ctx context.Context, p uint64) ([]byte, error) {
	var r wire.MemReply
	err := m.call(ctx, "DevExport", &wire.MemReq{Ptr: p}, &r)
	return r.Handle, err
}

// Import maps what another rank's plugin exported, and returns its
// pointer here.
func (m *Memory) Import(ctx context.Context, handle []byte) (uint64, error) {
	var r wire.MemReply
	err := m.call(ctx, "DevImport", &wire.MemReq{Handle: handle}, &r)
	return r.Ptr, err
}

// Copy copies n bytes from src+srcOff to dst+dstOff on the device.
func (m *Memory) Copy(ctx context.Context, dst uint64, dstOff int, src uint64, srcOff int, n int) error {
	return m.call(ctx, "DevCopy", &wire.MemReq{Ptr: dst, Off: uint64(dstOff), Src: src, SrcOff: uint64(srcOff), Bytes: uint64(n)}, &wire.Empty{})
}

// Reduce sets dst[i] = op(dst[i], src[i]) for count elements of dtype at
// dst+dstOff and src+srcOff, on the device.
func (m *Memory) Reduce(ctx context.Context, op, dtype string, dst uint64, dstOff int, src uint64, srcOff int, count int) error {
	return m.call(ctx, "DevReduce", &wire.MemReq{Ptr: dst, Off: uint64(dstOff), Src: src, SrcOff: uint64(srcOff), Count: uint64(count), Op: op, DType: dtype}, &wire.Empty{})
}
