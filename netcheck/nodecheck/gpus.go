package nodecheck

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/topology"
	"github.com/gorun/gorun/transport"
)

// gpu is one GPU as the measurement uses it: a plugin process of its
// own (CUDA IPC maps memory between processes only) and two buffers.
type gpu struct {
	name string // "GPU 3" as gorun topo names it, else the plugin's "cuda3"
	topo int    // its index in Node.GPUs, -1 when the node does not show it
	c    *plugins.Client
	m    *plugins.Memory
	// src is what the others copy from; dst what copies land in.
	src, dst uint64
}

// gpuRun is one measurement of a node's GPUs.
type gpuRun struct {
	o     Options
	node  *topology.Node
	gpus  []*gpu
	host  *transport.Region // host memory shared with every plugin
	bytes []byte            // host's first o.Bytes bytes
	one   []byte            // a byte read back to wait for a copy's end
}

// openGPUs starts the plugin once per GPU it sees, each with its own
// GPU (option device=N), and allocates the buffers.
func openGPUs(ctx context.Context, o Options, node *topology.Node) (*gpuRun, error) {
	r := &gpuRun{o: o, node: node, one: make([]byte, 1)}
	first, err := r.open(ctx, 0, nil)
	if err != nil {
		return r, err
	}
	devs, err := first.c.Devices(ctx)
	if err != nil {
		return r, err
	}
	if len(devs) == 0 {
		return r, errors.New("the plugin sees no GPU")
	}
	first.name, first.topo = gpuName(node, devs[0], 0)
	for i := 1; i < len(devs); i++ {
		g, err := r.open(ctx, i, &devs[i])
		if err != nil {
			return r, err
		}
		g.name, g.topo = gpuName(node, devs[i], i)
	}
	if r.host, err = transport.Alloc(o.Bytes); err != nil {
		return r, err
	}
	r.bytes = r.host.Bytes()[:o.Bytes]
	for i := range r.bytes {
		r.bytes[i] = byte(i)
	}
	return r, nil
}

// open starts the plugin for GPU i and allocates its buffers.
func (r *gpuRun) open(ctx context.Context, i int, dev *plugins.Device) (*gpu, error) {
	po := r.o.Plugin
	po.Rank, po.Size, po.LocalRank = -1, -1, -1
	po.PluginOptions = map[string]string{}
	for k, v := range r.o.Plugin.PluginOptions {
		po.PluginOptions[k] = v
	}
	po.PluginOptions["device"] = strconv.Itoa(i)
	c, err := plugins.Open(po)
	if err != nil {
		return nil, err
	}
	g := &gpu{name: "cuda" + strconv.Itoa(i), topo: -1, c: c}
	r.gpus = append(r.gpus, g)
	if g.m, err = c.Memory(); err != nil {
		return nil, err
	}
	if g.src, err = g.m.Alloc(ctx, r.o.Bytes); err != nil {
		return nil, fmt.Errorf("%s: %w", g.name, err)
	}
	if g.dst, err = g.m.Alloc(ctx, r.o.Bytes); err != nil {
		return nil, fmt.Errorf("%s: %w", g.name, err)
	}
	return g, nil
}

// gpuName names the plugin's device i as gorun topo does when node shows
// a GPU at its PCI address, and returns that GPU's index in node.GPUs
// (else the plugin's name and -1).
func gpuName(node *topology.Node, d plugins.Device, i int) (string, int) {
	if node != nil && d.PCI != "" {
		bus := topology.NormalizeBusID(d.PCI)
		for k := range node.GPUs {
			if node.GPUs[k].Vendor == topology.VendorNVIDIA && node.GPUs[k].BusID == bus {
				return node.GPUs[k].Name(), k
			}
		}
	}
	if d.Name != "" {
		return d.Name, -1
	}
	return "cuda" + strconv.Itoa(i), -1
}

// close stops every plugin, which frees what it allocated.
func (r *gpuRun) close() {
	for _, g := range r.gpus {
		g.c.Close()
	}
	if r.host != nil {
		r.host.Close()
	}
}

// probe is one measurement: op copies o.Bytes, sync waits for the copy
// to end (a copy may return before).
type probe struct {
	op, sync func() error
	fastest  time.Duration // of the timed runs, 0 before the first
	err      error
}

// gbps is the probe's bandwidth in GB/s, 0 when it has none.
func (p *probe) gbps(bytes int) float64 {
	if p.fastest == 0 {
		return 0
	}
	return float64(bytes) / p.fastest.Seconds() / 1e9
}

// run runs every probe once to warm up, then o.Iters rounds of every
// probe in turn, each probe keeping its fastest run: the rounds spread
// each probe's runs over the whole measurement, so that a while of
// contention (another process, a clock change) slows every probe alike
// rather than one. A probe that fails is run no more. It stops when ctx
// is done.
func (r *gpuRun) run(ctx context.Context, probes []*probe) {
	for round := 0; round <= r.o.Iters; round++ {
		for _, p := range probes {
			if ctx.Err() != nil {
				return
			}
			if p.err != nil {
				continue
			}
			t0 := time.Now()
			if p.err = p.op(); p.err == nil {
				p.err = p.sync()
			}
			if d := time.Since(t0); p.err == nil && round > 0 && (p.fastest == 0 || d < p.fastest) {
				p.fastest = d
			}
		}
	}
}

// measured reports whether p has a result: a timed run, or an error
// that is not ctx's end.
func measured(ctx context.Context, p *probe) bool {
	return p.fastest > 0 || (p.err != nil && ctx.Err() == nil)
}

// syncOn waits for g's copies to end: a read from its memory is carried
// out after them.
func (r *gpuRun) syncOn(ctx context.Context, g *gpu) func() error {
	return func() error { return g.m.Read(ctx, r.one, g.dst, 0) }
}

func none() error { return nil }

// hostCopies measures the copies between the host and each GPU, both
// ways.
func (r *gpuRun) hostCopies(ctx context.Context) []HostCopy {
	var probes []*probe
	for _, g := range r.gpus {
		probes = append(probes,
			&probe{op: func() error { return g.m.Write(ctx, g.dst, 0, r.bytes) }, sync: r.syncOn(ctx, g)},
			&probe{op: func() error { return g.m.Read(ctx, r.bytes, g.src, 0) }, sync: none})
	}
	r.run(ctx, probes)
	var out []HostCopy
	for i, g := range r.gpus {
		to, from := probes[2*i], probes[2*i+1]
		if !measured(ctx, to) || !measured(ctx, from) {
			continue
		}
		h := HostCopy{GPU: g.name, ToGPUGBps: to.gbps(r.o.Bytes), FromGPUGBps: from.gbps(r.o.Bytes)}
		if err := errors.Join(to.err, from.err); err != nil {
			h.Error = err.Error()
		}
		out = append(out, h)
	}
	return out
}

// pairs measures the copies from each GPU to each other one: the
// destination's plugin maps the source's buffer (CUDA IPC, with peer
// access) and copies from it into its own, as the device collectives
// do.
func (r *gpuRun) pairs(ctx context.Context) []PairResult {
	type pair struct {
		res  PairResult
		to   *gpu
		peer uint64 // the source's buffer mapped in to's plugin
		p    *probe
	}
	var all []*pair
	defer func() {
		for _, p := range all {
			if p.peer != 0 {
				p.to.m.Free(context.WithoutCancel(ctx), p.peer)
			}
		}
	}()
	for i, from := range r.gpus {
		h, err := from.m.Export(ctx, from.src)
		for j, to := range r.gpus {
			if i == j {
				continue
			}
			p := &pair{res: PairResult{From: from.name, To: to.name}, to: to, p: &probe{err: err}}
			if from.topo >= 0 && to.topo >= 0 {
				c := r.node.Link(topology.GPURef(from.topo), topology.GPURef(to.topo))
				p.res.Link, p.res.FloorGBps = c.String(), floor(c)
			}
			if p.p.err == nil {
				p.peer, p.p.err = to.m.Import(ctx, h)
			}
			p.p.op = func() error { return to.m.Copy(ctx, to.dst, 0, p.peer, 0, r.o.Bytes) }
			p.p.sync = r.syncOn(ctx, to)
			all = append(all, p)
		}
	}
	probes := make([]*probe, len(all))
	for i, p := range all {
		probes[i] = p.p
	}
	r.run(ctx, probes)
	var out []PairResult
	for _, p := range all {
		if !measured(ctx, p.p) {
			continue
		}
		p.res.GBps = p.p.gbps(r.o.Bytes)
		if p.p.err != nil {
			p.res.Error = p.p.err.Error()
		}
		out = append(out, p.res)
	}
	return out
}
