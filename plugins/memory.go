package plugins

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gorun/gorun/internal/request"
	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
)

// Memory is a device plugin's memory (a GPU's, for plugins/cuda), as the
// rank uses it: allocations the plugin makes and names by opaque
// pointers, filled and read through the memory the rank shares with the
// plugin, shared with the other ranks of the host (Export, Import), and
// copied and reduced on the device. Each call is a work request in the
// shared rings, carried out in order; it returns when the plugin is done.
type Memory struct {
	c    *Client
	conn *conn // names the plugin in errors
}

// Memory returns the plugin's device memory; it stays valid until c
// closes.
func (c *Client) Memory() (*Memory, error) {
	if !c.info.Memory {
		return nil, fmt.Errorf("plugin %s (%s): %w: it manages no device memory", c.name, c.path, transport.ErrNotSupported)
	}
	return &Memory{c: c, conn: &conn{t: &Transport{c: c}, peer: "device"}}, nil
}

// call submits req and waits for its completion; the reply, when the
// request has one, is decoded into reply.
func (m *Memory) call(ctx context.Context, req *wire.MemReq, reply *wire.MemReply) error {
	payload, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r := &hreq{Request: request.New(m.c), conn: m.conn, op: "device"}
	if err := m.c.track(r); err != nil {
		return err
	}
	m.c.submit(wire.SQDev, 0, r.id, 0, payload)
	if _, err := r.Wait(ctx); err != nil {
		return fmt.Errorf("plugin %s: device %s: %w", m.c.name, req.Method, err)
	}
	if reply != nil {
		if err := json.Unmarshal(r.reply, reply); err != nil {
			return fmt.Errorf("plugin %s: device %s: %w: reply %q", m.c.name, req.Method, transport.ErrProtocol, r.reply)
		}
	}
	return nil
}

// Alloc allocates n bytes of device memory.
func (m *Memory) Alloc(ctx context.Context, n int) (uint64, error) {
	var r wire.MemReply
	err := m.call(ctx, &wire.MemReq{Method: "alloc", Bytes: uint64(n)}, &r)
	return r.Ptr, err
}

// Free frees an allocation, or unmaps an import.
func (m *Memory) Free(ctx context.Context, p uint64) error {
	return m.call(ctx, &wire.MemReq{Method: "free", Ptr: p}, nil)
}

// Write copies src to the device memory at p+off.
func (m *Memory) Write(ctx context.Context, p uint64, off int, src []byte) error {
	return m.io(ctx, "write", p, off, src, true)
}

// Read copies the device memory at p+off into dst.
func (m *Memory) Read(ctx context.Context, dst []byte, p uint64, off int) error {
	return m.io(ctx, "read", p, off, dst, false)
}

// io moves b through memory the plugin maps: b's own region, or a bounce
// buffer.
func (m *Memory) io(ctx context.Context, method string, p uint64, off int, b []byte, in bool) error {
	if len(b) == 0 {
		return nil
	}
	ref, bounce, err := m.c.sharedRef(b, in)
	if err != nil {
		return err
	}
	if bounce != nil {
		defer m.c.bounces.put(bounce)
	}
	if err := m.call(ctx, &wire.MemReq{Method: method, Ptr: p, Off: uint64(off), Ref: ref}, nil); err != nil {
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
	err := m.call(ctx, &wire.MemReq{Method: "export", Ptr: p}, &r)
	return r.Handle, err
}

// Import maps what another rank's plugin exported, and returns its
// pointer here.
func (m *Memory) Import(ctx context.Context, handle []byte) (uint64, error) {
	var r wire.MemReply
	err := m.call(ctx, &wire.MemReq{Method: "import", Handle: handle}, &r)
	return r.Ptr, err
}

// Copy copies n bytes from src+srcOff to dst+dstOff on the device.
func (m *Memory) Copy(ctx context.Context, dst uint64, dstOff int, src uint64, srcOff int, n int) error {
	return m.call(ctx, &wire.MemReq{Method: "copy", Ptr: dst, Off: uint64(dstOff), Src: src, SrcOff: uint64(srcOff), Bytes: uint64(n)}, nil)
}

// Reduce sets dst[i] = op(dst[i], src[i]) for count elements of dtype at
// dst+dstOff and src+srcOff, on the device.
func (m *Memory) Reduce(ctx context.Context, op, dtype string, dst uint64, dstOff int, src uint64, srcOff int, count int) error {
	return m.call(ctx, &wire.MemReq{Method: "reduce", Ptr: dst, Off: uint64(dstOff), Src: src, SrcOff: uint64(srcOff), Count: uint64(count), Op: op, DType: dtype}, nil)
}
