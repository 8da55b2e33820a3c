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
// by the world's device plugin (gorun --device cuda): the rank fills and
// reads it through the plugin (Write, Read), and the device collectives
// (AllReduceDevice and the others below) move and reduce it on the
// devices. On one host the ranks' plugins map each other's buffers (CUDA
// IPC: NVLink where the GPUs have peer access, PCIe otherwise) and reduce
// on the GPUs; across hosts the data goes through host memory and the
// communicator's transports (a --plugin's, such as fabric's, where there
// is one).
type DeviceBuffer struct {
	c   *Communicator
	m   *plugins.Memory
	ptr uint64
	n   int

	mu      sync.Mutex
	peers   []uint64      // the other ranks' buffers mapped here, by rank of peersOf; nil until needed
	peersOf *Communicator // the communicator of those ranks
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

// The device collectives. Every rank calls the same ones in the same
// order, with buffers of the same size. On one host each rank's plugin
// maps the others' buffers (their export handles gathered once per
// buffer) and the ranks copy and reduce from each other's buffers on the
// devices, a barrier before, between and after the phases, so that no
// rank reads what another has not written or overwrites what another
// still reads. Across hosts, AllReduceDevice runs in three phases where
// every host has as many ranks: a reduce-scatter on the devices inside
// each host, an allreduce of each rank's part with the same part on the
// other hosts through host memory and the communicator's transports (the
// --plugin transport's where there is one), and an all-gather on the
// devices; the other collectives, and hosts of unequal ranks, stage the
// whole buffer through host memory. The reductions take Float32, FP16 or
// BF16 with Sum, Min or Max.
//
// Where a collective works on parts, rank r's part of count elements is
// elements [r*count/size, (r+1)*count/size): ReduceScatterDevice and
// AllGatherDevice need count to be a multiple of the ranks.

// AllReduceDevice reduces the buffers of every rank and leaves the result
// in each: each rank reduces its part from every other's buffer into its
// own, then copies every other part from its owner.
func AllReduceDevice(ctx context.Context, c *Communicator, b *DeviceBuffer, dtype DType, op Op) error {
	d, err := startDevice(ctx, c, b, "allreduce device", dtype, op, false)
	if err != nil || d == nil {
		return err
	}
	if d.staged {
		cross, ok, err := d.hier(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return d.throughHost(ctx, func(h []byte) error { return allReduceHost(ctx, c, h, dtype, op) })
		}
		// This host's ranks reduce-scatter on their devices, each rank
		// all-reduces its part with the same part of the other hosts
		// through host memory, and the host's ranks all-gather.
		across := func(ctx context.Context) error {
			off, n := d.part(d.g.rank)
			if n == 0 {
				return nil // as on every host, at this local rank
			}
			part := make([]byte, n*d.esz)
			if err := b.Read(ctx, off, part); err != nil {
				return err
			}
			if err := allReduceHost(ctx, cross, part, dtype, op); err != nil {
				return err
			}
			return b.Write(ctx, off, part)
		}
		return d.phases(ctx, d.reduceOwn, across, d.gatherOthers)
	}
	return d.phases(ctx, d.reduceOwn, d.gatherOthers)
}

// ReduceScatterDevice reduces the buffers of every rank and leaves in each
// rank's part of its buffer that part of the result (the rest of the
// buffer is left as it was, or, across hosts, holds intermediate data).
func ReduceScatterDevice(ctx context.Context, c *Communicator, b *DeviceBuffer, dtype DType, op Op) error {
	d, err := startDevice(ctx, c, b, "reducescatter device", dtype, op, true)
	if err != nil || d == nil {
		return err
	}
	if d.staged {
		return d.throughHost(ctx, func(h []byte) error {
			off, n := d.part(c.rank)
			own := make([]byte, n*d.esz)
			if err := reduceScatterHost(ctx, c, h, own, dtype, op); err != nil {
				return err
			}
			copy(h[off:], own)
			return nil
		})
	}
	return d.phases(ctx, d.reduceOwn)
}

// AllGatherDevice gives every rank every part: rank r's part of each
// buffer comes from rank r's buffer. The elements are bytes here (dtype
// only says how the buffer divides: its size is a multiple of the ranks'
// count of dtype elements).
func AllGatherDevice(ctx context.Context, c *Communicator, b *DeviceBuffer, dtype DType) error {
	d, err := startDevice(ctx, c, b, "allgather device", dtype, 0, true)
	if err != nil || d == nil {
		return err
	}
	if d.staged {
		return d.throughHost(ctx, func(h []byte) error {
			off, n := d.part(c.rank)
			own := append([]byte(nil), h[off:off+n*d.esz]...)
			return AllGather(ctx, c, own, h)
		})
	}
	return d.phases(ctx, d.gatherOthers)
}

// BroadcastDevice copies root's buffer into every rank's.
func BroadcastDevice(ctx context.Context, c *Communicator, b *DeviceBuffer, root int) error {
	if err := c.checkRoot("broadcast device", root); err != nil {
		return err
	}
	d, err := startDevice(ctx, c, b, "broadcast device", Uint8, 0, false)
	if err != nil || d == nil {
		return err
	}
	if d.staged {
		return d.throughHost(ctx, func(h []byte) error { return Broadcast(ctx, c, h, root) })
	}
	return d.phases(ctx, func(ctx context.Context) error {
		if c.rank == root {
			return nil
		}
		return d.try("copying from the root", b.m.Copy(ctx, b.ptr, 0, b.peers[root], 0, b.n))
	})
}

// deviceSplit holds the communicators of hierarchical device collectives:
// this host's ranks, and the ranks of this local rank on every host.
type deviceSplit struct {
	local, cross *Communicator
}

// deviceComms returns the world's deviceSplit, splitting it on first use.
// Every rank gets there at the same collective (device collectives are
// called in the same order everywhere), so the splits match.
func (c *Communicator) deviceComms(ctx context.Context) (*deviceSplit, error) {
	c.devMu.Lock()
	defer c.devMu.Unlock()
	if c.devSplit != nil {
		return c.devSplit, nil
	}
	local, err := c.Split(ctx, c.topo.myHost, c.rank)
	if err != nil {
		return nil, err
	}
	cross, err := c.Split(ctx, c.topo.myLocal, c.topo.myHost)
	if err != nil {
		local.Close()
		return nil, err
	}
	c.devSplit = &deviceSplit{local: local, cross: cross}
	return c.devSplit, nil
}

// deviceOp is one device collective under way.
type deviceOp struct {
	c      *Communicator
	g      *Communicator // whose ranks the device phases run among: c, or this host's ranks of c
	b      *DeviceBuffer
	name   string
	dtype  DType
	op     Op
	esz    int
	count  int
	staged bool // across hosts: through host memory
}

// startDevice checks a device collective's arguments and maps the peers'
// buffers where it runs on one host; a nil deviceOp means there is
// nothing to do (one rank). op 0 means no reduction; parts says the
// buffer must divide into equal parts.
func startDevice(ctx context.Context, c *Communicator, b *DeviceBuffer, name string, dtype DType, op Op, parts bool) (*deviceOp, error) {
	switch {
	case b == nil || b.c != c:
		return nil, invalid(name, "the buffer was not allocated on this communicator")
	case op != 0 && dtype != Float32 && dtype != FP16 && dtype != BF16:
		return nil, invalid(name, "element type %s (float32, float16 and bfloat16 only)", dtype)
	case op != 0 && op != Sum && op != Min && op != Max:
		return nil, invalid(name, "operator %s (sum, min and max only)", op)
	case dtype.Size() == 0 || b.n%dtype.Size() != 0:
		return nil, invalid(name, "%d bytes is not a whole number of %s", b.n, dtype)
	case parts && (b.n/dtype.Size())%c.size != 0:
		return nil, invalid(name, "%d elements do not divide among %d ranks", b.n/dtype.Size(), c.size)
	}
	if c.size == 1 {
		return nil, nil
	}
	d := &deviceOp{c: c, g: c, b: b, name: name, dtype: dtype, op: op, esz: dtype.Size(), count: b.n / dtype.Size(), staged: c.Hosts() > 1}
	if !d.staged {
		if err := b.mapPeers(ctx, c); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// hier makes d run its device phases among this host's ranks (mapping
// their buffers), for a collective whose cross-host step goes over the
// communicator of the same local rank on every host; it reports false
// where the hosts have different numbers of ranks, and d stays staged.
func (d *deviceOp) hier(ctx context.Context) (cross *Communicator, ok bool, err error) {
	if !d.c.topo.uniform {
		return nil, false, nil
	}
	sub, err := d.c.deviceComms(ctx)
	if err != nil {
		return nil, false, err
	}
	if sub.local.size > 1 {
		if err := d.b.mapPeers(ctx, sub.local); err != nil {
			return nil, false, err
		}
	}
	d.g, d.staged = sub.local, false
	return sub.cross, true, nil
}

// part returns rank r's elements, as a byte offset and a count.
func (d *deviceOp) part(r int) (off, n int) {
	lo, hi := r*d.count/d.g.size, (r+1)*d.count/d.g.size
	return lo * d.esz, hi - lo
}

// try wraps a failed step's error with the collective and the rank.
func (d *deviceOp) try(what string, err error) error {
	if err != nil {
		return fmt.Errorf("collectives: %s: rank %d: %s: %w", d.name, d.c.rank, what, err)
	}
	return nil
}

// phases runs the steps with a barrier before each and after the last.
func (d *deviceOp) phases(ctx context.Context, steps ...func(context.Context) error) error {
	for _, step := range steps {
		if err := d.g.Barrier(ctx); err != nil {
			return err
		}
		if err := step(ctx); err != nil {
			return err
		}
	}
	return d.g.Barrier(ctx)
}

// reduceOwn reduces this rank's part from every other rank's buffer into
// its own, starting with the next rank's, so that the ranks read from
// different peers at once.
func (d *deviceOp) reduceOwn(ctx context.Context) error {
	g, b := d.g, d.b
	off, n := d.part(g.rank)
	if n == 0 {
		return nil
	}
	for i := 1; i < g.size; i++ {
		j := (g.rank + i) % g.size
		if err := d.try(fmt.Sprintf("reducing rank %d's part", j), b.m.Reduce(ctx, d.op.String(), d.dtype.String(), b.ptr, off, b.peers[j], off, n)); err != nil {
			return err
		}
	}
	return nil
}

// gatherOthers copies every other rank's part from that rank's buffer.
func (d *deviceOp) gatherOthers(ctx context.Context) error {
	g, b := d.g, d.b
	for i := 1; i < g.size; i++ {
		j := (g.rank + i) % g.size
		if off, n := d.part(j); n > 0 {
			if err := d.try(fmt.Sprintf("copying rank %d's part", j), b.m.Copy(ctx, b.ptr, off, b.peers[j], off, n*d.esz)); err != nil {
				return err
			}
		}
	}
	return nil
}

// throughHost runs f on a host copy of the buffer and writes the result
// back.
func (d *deviceOp) throughHost(ctx context.Context, f func(host []byte) error) error {
	host := make([]byte, d.b.n)
	if err := d.b.Read(ctx, 0, host); err != nil {
		return err
	}
	if err := f(host); err != nil {
		return err
	}
	return d.b.Write(ctx, 0, host)
}

// mapPeers maps the buffers of c's other ranks (c is the buffer's
// communicator, or this host's ranks of it) into this rank's plugin, once
// per buffer: the ranks gather each other's export handles.
func (b *DeviceBuffer) mapPeers(ctx context.Context, c *Communicator) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers != nil {
		if b.peersOf != c {
			return fmt.Errorf("collectives: rank %d: a device buffer's peers were mapped for another communicator", b.c.rank)
		}
		return nil
	}
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
	b.peers, b.peersOf = peers, c
	return nil
}

// allReduceHost all-reduces the elements of dtype in h.
func allReduceHost(ctx context.Context, c *Communicator, h []byte, dtype DType, op Op) error {
	switch dtype {
	case FP16:
		return AllReduce(ctx, c, view[Float16](h), op)
	case BF16:
		return AllReduce(ctx, c, view[BFloat16](h), op)
	}
	return AllReduce(ctx, c, view[float32](h), op)
}

// reduceScatterHost reduce-scatters the elements of dtype in h into own.
func reduceScatterHost(ctx context.Context, c *Communicator, h, own []byte, dtype DType, op Op) error {
	switch dtype {
	case FP16:
		return ReduceScatter(ctx, c, view[Float16](h), view[Float16](own), op)
	case BF16:
		return ReduceScatter(ctx, c, view[BFloat16](h), view[BFloat16](own), op)
	}
	return ReduceScatter(ctx, c, view[float32](h), view[float32](own), op)
}
