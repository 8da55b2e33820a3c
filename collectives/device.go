package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/gorun/gorun/plugins"
)

// ErrNoDevice is returned by AllocDevice when the world has no device
// plugin (gorun --device cuda, Setup.Device).
var ErrNoDevice = errors.New("collectives: no device plugin (gorun --device cuda)")

// maxExport bounds the bytes of a device plugin's export handle.
const maxExport = 4096

// DeviceBuffer is memory on the rank's accelerator (its GPU), allocated
// by the world's device plugin (gorun --device cuda): the rank fills and reads it through the
// plugin (Write, Read), and the device collectives (AllReduceDevice)
// move and reduce it on the devices. On one host the ranks' plugins map
// each other's buffers (CUDA IPC: NVLink where the GPUs have peer access,
// PCIe otherwise) and reduce on the GPUs; across hosts the data goes
// through host memory and the communicator's transports (a --plugin's,
// such as fabric's, where there is one).
type DeviceBuffer struct {
	c   *Communicator
	m   *plugins.Memory
	ptr uint64
	n   int

	mu    sync.Mutex
	peers []uint64 // the other ranks' buffers mapped here, by rank; nil until needed
}

// AllocDevice allocates n bytes on the rank's device. It fails with
// ErrNoDevice when the world has no device plugin. Only the world
// communicator (not one made by Split) has one.
func (c *Communicator) AllocDevice(ctx context.Context, n int) (*DeviceBuffer, error) {
	if c.device == nil {
		return nil, ErrNoDevice
	}
	if n <= 0 {
		return nil, invalid("alloc device", "%d bytes", n)
	}
	p, err := c.device.Alloc(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("collectives: rank %d: device allocation of %d bytes: %w", c.rank, n, err)
	}
	return &DeviceBuffer{c: c, m: c.device, ptr: p, n: n}, nil
}

// Len returns the buffer's size in bytes.
func (b *DeviceBuffer) Len() int { return b.n }

// Write copies src to the buffer at off.
func (b *DeviceBuffer) Write(ctx context.Context, off int, src []byte) error {
	if off < 0 || off+len(src) > b.n {
		return invalid("device write", "%d bytes at %d of a %d-byte buffer", len(src), off, b.n)
	}
	return b.m.Write(ctx, b.ptr, off, src)
}

// Read copies the buffer from off into dst.
func (b *DeviceBuffer) Read(ctx context.Context, off int, dst []byte) error {
	if off < 0 || off+len(dst) > b.n {
		return invalid("device read", "%d bytes at %d of a %d-byte buffer", len(dst), off, b.n)
	}
	return b.m.Read(ctx, dst, b.ptr, off)
}

// Free releases the buffer and the other ranks' buffers mapped for it.
// Every rank frees its own after the last collective on it.
func (b *DeviceBuffer) Free(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, p := range b.peers {
		if p != 0 {
			errs = append(errs, b.m.Free(ctx, p))
		}
	}
	b.peers = nil
	errs = append(errs, b.m.Free(ctx, b.ptr))
	return errors.Join(errs...)
}

// AllReduceDevice reduces the buffers of every rank, elements of dtype
// (Float32, FP16 or BF16) with op (Sum, Min or Max), and leaves the
// result in each. Every rank calls it with a buffer of the same size.
//
// On one host each rank owns a contiguous part of the elements: it
// reduces that part from every other rank's buffer straight into its own
// (the peers' buffers are mapped into its plugin), and then copies every
// other part from its owner, with a barrier before, between and after.
// Across hosts the buffer goes through host memory and AllReduce.
func AllReduceDevice(ctx context.Context, c *Communicator, b *DeviceBuffer, dtype DType, op Op) error {
	const name = "allreduce device"
	switch {
	case b == nil || b.c != c:
		return invalid(name, "the buffer was not allocated on this communicator")
	case dtype != Float32 && dtype != FP16 && dtype != BF16:
		return invalid(name, "element type %s (float32, float16 and bfloat16 only)", dtype)
	case op != Sum && op != Min && op != Max:
		return invalid(name, "operator %s (sum, min and max only)", op)
	case b.n%dtype.Size() != 0:
		return invalid(name, "%d bytes is not a whole number of %s", b.n, dtype)
	}
	if c.size == 1 {
		return nil
	}
	if c.Hosts() > 1 {
		return allReduceStaged(ctx, c, b, dtype, op)
	}
	if err := b.mapPeers(ctx); err != nil {
		return err
	}
	count, esz := b.n/dtype.Size(), dtype.Size()
	part := func(r int) (off, n int) { // rank r's elements, as a byte offset and a count
		lo, hi := r*count/c.size, (r+1)*count/c.size
		return lo * esz, hi - lo
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("collectives: %s: rank %d: %s: %w", name, c.rank, what, err)
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if off, n := part(c.rank); n > 0 {
		for i := 1; i < c.size; i++ {
			j := (c.rank + i) % c.size
			if err := b.m.Reduce(ctx, op.String(), dtype.String(), b.ptr, off, b.peers[j], off, n); err != nil {
				return fail(fmt.Sprintf("reducing rank %d's part", j), err)
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	for i := 1; i < c.size; i++ {
		j := (c.rank + i) % c.size
		if off, n := part(j); n > 0 {
			if err := b.m.Copy(ctx, b.ptr, off, b.peers[j], off, n*esz); err != nil {
				return fail(fmt.Sprintf("copying rank %d's part", j), err)
			}
		}
	}
	return c.Barrier(ctx)
}

// mapPeers maps every other rank's buffer into this rank's plugin, once
// per buffer: the ranks gather each other's export handles.
func (b *DeviceBuffer) mapPeers(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers != nil {
		return nil
	}
	c := b.c
	h, err := b.m.Export(ctx, b.ptr)
	if err != nil {
		return fmt.Errorf("collectives: rank %d: exporting its device buffer: %w", c.rank, err)
	}
	if len(h) > maxExport {
		return fmt.Errorf("collectives: rank %d: an export handle of %d bytes", c.rank, len(h))
	}
	const slot = 4 + maxExport
	send := make([]byte, slot)
	binary.LittleEndian.PutUint32(send, uint32(len(h)))
	copy(send[4:], h)
	all := make([]byte, slot*c.size)
	if err := AllGather(ctx, c, send, all); err != nil {
		return err
	}
	peers := make([]uint64, c.size)
	for r := range c.size {
		if r == c.rank {
			peers[r] = b.ptr
			continue
		}
		s := all[r*slot : (r+1)*slot]
		n := binary.LittleEndian.Uint32(s)
		if n == 0 || n > maxExport {
			return fmt.Errorf("collectives: rank %d sent a device handle of %d bytes", r, n)
		}
		p, err := b.m.Import(ctx, s[4:4+n])
		if err != nil {
			for _, q := range peers[:r] {
				if q != 0 && q != b.ptr {
					b.m.Free(ctx, q)
				}
			}
			return fmt.Errorf("collectives: rank %d: mapping rank %d's device buffer: %w", c.rank, r, err)
		}
		peers[r] = p
	}
	peers[c.rank] = 0 // not freed by Free: it is b.ptr
	b.peers = peers
	return nil
}

// allReduceStaged reduces through host memory: the buffer is read, reduced
// with AllReduce over the communicator's transports, and written back.
func allReduceStaged(ctx context.Context, c *Communicator, b *DeviceBuffer, dtype DType, op Op) error {
	host := make([]byte, b.n)
	if err := b.Read(ctx, 0, host); err != nil {
		return err
	}
	var err error
	switch dtype {
	case Float32:
		err = AllReduce(ctx, c, view[float32](host), op)
	case FP16:
		err = AllReduce(ctx, c, view[Float16](host), op)
	case BF16:
		err = AllReduce(ctx, c, view[BFloat16](host), op)
	}
	if err != nil {
		return err
	}
	return b.Write(ctx, 0, host)
}
