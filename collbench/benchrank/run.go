package benchrank

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/collectives"
)

// Run measures cfg on every rank of c (all must call it with the same
// cfg) and returns, on every rank, the results: the slowest rank's mean
// time per iteration and the wrong elements of all ranks. Rank 0 writes
// each result to cfg.Out as soon as it is measured.
func Run(ctx context.Context, c *collectives.Communicator, cfg collbench.Config) ([]collbench.Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Op == "" {
		cfg.Op = "sum"
	}
	if cfg.DType == "" {
		cfg.DType = "float32"
	}
	if cfg.Iters == 0 {
		cfg.Iters = 20
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = 5
	}
	cfg.Warmup = max(cfg.Warmup, 0)
	if cfg.Root < 0 || cfg.Root >= c.Size() {
		return nil, fmt.Errorf("collbench: root %d: the job has %d ranks", cfg.Root, c.Size())
	}
	if c.Rank() == 0 && cfg.Out != nil {
		h := collbench.Header{Collective: cfg.Collective, DType: cfg.DType, Ranks: c.Size(), Hosts: c.Hosts(),
			Transport: c.Transports(), Iters: cfg.Iters, Warmup: cfg.Warmup, Device: cfg.Device}
		if collbench.Reduction(cfg.Collective) {
			h.Op = cfg.Op
		}
		if cfg.AllTypes {
			h.DType, h.Op = "all", ""
		}
		b, _ := json.Marshal(h)
		fmt.Fprintf(cfg.Out, "%s%s\n", collbench.InfoPrefix, b)
	}
	colls := []string{cfg.Collective}
	if cfg.Collective == collbench.All {
		colls = collbench.Collectives
	}
	var out []collbench.Result
	for _, coll := range colls {
		dtypes, ops := []string{cfg.DType}, []string{cfg.Op}
		if cfg.AllTypes && coll != "barrier" {
			dtypes = collbench.DTypes
			if collbench.Reduction(coll) {
				ops = collbench.Ops
			}
		}
		for _, dt := range dtypes {
			for _, op := range ops {
				one := cfg
				one.Collective, one.DType, one.Op = coll, dt, op
				rs, err := runOne(ctx, c, one)
				out = append(out, rs...)
				if err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// runOne measures one collective, type and operator at every size.
func runOne(ctx context.Context, c *collectives.Communicator, cfg collbench.Config) ([]collbench.Result, error) {
	sizes := cfg.Sizes
	if cfg.Collective == "barrier" {
		sizes = []int64{0}
	}
	var out []collbench.Result
	for _, size := range sizes {
		var r collbench.Result
		var err error
		switch cfg.DType {
		case "float32":
			r, err = measure[float32](ctx, c, cfg, size)
		case "float64":
			r, err = measure[float64](ctx, c, cfg, size)
		case "int32":
			r, err = measure[int32](ctx, c, cfg, size)
		case "int64":
			r, err = measure[int64](ctx, c, cfg, size)
		case "uint8":
			r, err = measure[uint8](ctx, c, cfg, size)
		case "bfloat16":
			r, err = measure[collectives.BFloat16](ctx, c, cfg, size)
		case "float16":
			r, err = measure[collectives.Float16](ctx, c, cfg, size)
		}
		if err != nil {
			return out, fmt.Errorf("collbench: %s of %s %s: %w", cfg.Collective, collbench.FormatSize(size), cfg.DType, err)
		}
		out = append(out, r)
		if c.Rank() == 0 && cfg.Out != nil {
			b, _ := json.Marshal(r)
			fmt.Fprintf(cfg.Out, "%s%s\n", collbench.ResultPrefix, b)
		}
	}
	return out, nil
}

// bench holds one size's buffers and runs the collective on them.
type bench[T collectives.Element] struct {
	c          *collectives.Communicator
	cfg        collbench.Config
	op         collectives.Op
	n, r       int
	count, per int // elements: the whole (nccl-tests' count) and one rank's block
	send, recv []T
	dev        *collectives.DeviceBuffer // send's data on the device (Config.Device)
}

func opOf(name string) collectives.Op {
	switch name {
	case "prod":
		return collectives.Prod
	case "min":
		return collectives.Min
	case "max":
		return collectives.Max
	case "avg":
		return collectives.Avg
	}
	return collectives.Sum
}

func measure[T collectives.Element](ctx context.Context, c *collectives.Communicator, cfg collbench.Config, size int64) (collbench.Result, error) {
	elem := collectives.DTypeOf[T]().Size()
	b := &bench[T]{c: c, cfg: cfg, op: opOf(cfg.Op), n: c.Size(), r: c.Rank()}
	b.count = int(size) / elem
	switch cfg.Collective {
	case "allgather", "reducescatter", "alltoall":
		b.per = b.count / b.n
		b.count = b.per * b.n
	}
	// The buffers are shared memory (as nccl-tests' device buffers):
	// plugin transports move them without copies; to the built-in ones
	// they are ordinary memory.
	var frees []func() error
	defer func() {
		for _, f := range frees {
			f()
		}
	}()
	buf := func(n int) []T {
		s, free, err := collectives.AllocShared[T](n)
		if err != nil {
			return make([]T, n)
		}
		frees = append(frees, free)
		return s
	}
	switch cfg.Collective {
	case "allreduce", "broadcast", "reduce":
		b.send = buf(b.count)
	case "allgather":
		b.send, b.recv = buf(b.per), buf(b.count)
	case "reducescatter":
		b.send, b.recv = buf(b.count), buf(b.per)
	case "alltoall", "sendrecv":
		b.send, b.recv = buf(b.count), buf(b.count)
	}
	res := collbench.Result{Collective: cfg.Collective, DType: cfg.DType, Ranks: b.n, Bytes: int64(b.count * elem), Count: int64(b.count), Errors: -1}
	if collbench.Reduction(cfg.Collective) {
		res.Op = cfg.Op
	}
	res.Algorithm = algorithm(c, cfg.Collective, b.count, b.per, elem)
	if cfg.Device != "" && b.count > 0 {
		var err error
		if b.dev, err = c.AllocDevice(ctx, b.count*elem); err != nil {
			return res, err
		}
		defer b.dev.Free(ctx)
		res.Algorithm = "device"
		if c.Hosts() > 1 {
			res.Algorithm = "device-staged"
		}
	}

	if err := b.load(ctx); err != nil {
		return res, err
	}
	for range cfg.Warmup {
		if err := b.once(ctx); err != nil {
			return res, err
		}
	}
	iters := cfg.Iters
	if cfg.MinTime > 0 {
		probe, err := b.timed(ctx, 1)
		if err != nil {
			return res, err
		}
		iters = int(min(max(float64(cfg.MinTime)/max(probe, 1), 1), 1e6))
	}
	times := make([]float64, max(cfg.Blocks, 1))
	for i := range times {
		t, err := b.timed(ctx, iters)
		if err != nil {
			return res, err
		}
		times[i] = t
	}
	slices.Sort(times)
	mean := []float64{times[len(times)/2]}
	res.Time = time.Duration(math.Round(mean[0]))
	res.Fill()
	if cfg.Check {
		if err := b.load(ctx); err != nil {
			return res, err
		}
		if err := b.once(ctx); err != nil {
			return res, err
		}
		if b.dev != nil {
			if err := b.unload(ctx); err != nil {
				return res, err
			}
		}
		wrong := []int64{int64(b.verify())}
		if err := collectives.AllReduce(ctx, c, wrong, collectives.Sum); err != nil {
			return res, err
		}
		res.Errors = int(wrong[0])
	}
	return res, nil
}

// timed runs iters iterations between barriers and returns the slowest
// rank's mean time per iteration, in nanoseconds.
func (b *bench[T]) timed(ctx context.Context, iters int) (float64, error) {
	if err := b.c.Barrier(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	for range iters {
		if err := b.once(ctx); err != nil {
			return 0, err
		}
	}
	mean := []float64{float64(time.Since(start).Nanoseconds()) / float64(iters)}
	if err := collectives.AllReduce(ctx, b.c, mean, collectives.Max); err != nil {
		return 0, err
	}
	return mean[0], nil
}

// algorithm names what the communicator runs for the collective.
func algorithm(c *collectives.Communicator, name string, count, per, elem int) string {
	var coll collectives.Collective
	bytes := int64(count * elem)
	switch name {
	case "allreduce":
		coll = collectives.CollAllReduce
	case "broadcast":
		coll = collectives.CollBroadcast
	case "reduce":
		coll = collectives.CollReduce
	case "allgather":
		coll = collectives.CollAllGather
	case "reducescatter":
		coll = collectives.CollReduceScatter
	case "alltoall":
		coll, bytes = collectives.CollAllToAll, int64(per*elem)
	case "barrier":
		coll = collectives.CollBarrier
	default:
		return "p2p"
	}
	if c.Size() == 1 {
		return "local"
	}
	ch := c.Choose(coll, bytes)
	if len(ch.Phases) == 0 {
		return ch.Algorithm.String()
	}
	var ph []string
	for _, p := range ch.Phases {
		ph = append(ph, p.Algorithm.String())
	}
	return "hier(" + strings.Join(ph, ",") + ")"
}

// load fills the buffers with this rank's input, on the device too: the
// whole send buffer, or for allgather this rank's part.
func (b *bench[T]) load(ctx context.Context) error {
	b.fill()
	if b.dev == nil {
		return nil
	}
	off := 0
	if b.cfg.Collective == "allgather" {
		off = b.r * b.per * collectives.DTypeOf[T]().Size()
	}
	return b.dev.Write(ctx, off, collectives.Bytes(b.send))
}

// unload reads the device buffer's result into the host buffer verify
// checks: the whole (allreduce, broadcast: send; allgather: recv), or
// this rank's part (reducescatter: recv).
func (b *bench[T]) unload(ctx context.Context) error {
	switch b.cfg.Collective {
	case "allgather":
		return b.dev.Read(ctx, 0, collectives.Bytes(b.recv))
	case "reducescatter":
		return b.dev.Read(ctx, b.r*b.per*collectives.DTypeOf[T]().Size(), collectives.Bytes(b.recv))
	}
	return b.dev.Read(ctx, 0, collectives.Bytes(b.send))
}

// once runs the collective one time.
func (b *bench[T]) once(ctx context.Context) error {
	c := b.c
	if b.dev != nil {
		dt := collectives.DTypeOf[T]()
		switch b.cfg.Collective {
		case "reducescatter":
			return collectives.ReduceScatterDevice(ctx, c, b.dev, dt, b.op)
		case "allgather":
			return collectives.AllGatherDevice(ctx, c, b.dev, dt)
		case "broadcast":
			return collectives.BroadcastDevice(ctx, c, b.dev, b.cfg.Root)
		}
		return collectives.AllReduceDevice(ctx, c, b.dev, dt, b.op)
	}
	switch b.cfg.Collective {
	case "allreduce":
		return collectives.AllReduce(ctx, c, b.send, b.op)
	case "broadcast":
		return collectives.Broadcast(ctx, c, b.send, b.cfg.Root)
	case "reduce":
		return collectives.Reduce(ctx, c, b.send, b.op, b.cfg.Root)
	case "allgather":
		return collectives.AllGather(ctx, c, b.send, b.recv)
	case "reducescatter":
		return collectives.ReduceScatter(ctx, c, b.send, b.recv, b.op)
	case "alltoall":
		return collectives.AllToAll(ctx, c, b.send, b.recv)
	case "sendrecv":
		if b.n == 1 {
			copy(b.recv, b.send)
			return nil
		}
		req := collectives.SendAsync(ctx, c, b.send, (b.r+1)%b.n, 0)
		err := collectives.Recv(ctx, c, b.recv, (b.r+b.n-1)%b.n, 0)
		if werr := req.Wait(); err == nil {
			err = werr
		}
		return err
	case "barrier":
		return c.Barrier(ctx)
	}
	return nil
}

// input is rank r's element i: small integers, so that every type and
// operator has an exact (or, for the 16-bit floats, nearly exact) result.
// For products every element is 1 but one rank's 2, so that the product
// is 2 and never overflows.
func (b *bench[T]) input(r, i int) float64 {
	if b.op == collectives.Prod {
		if i%b.n == r {
			return 2
		}
		return 1
	}
	return float64((r+i)%4 + 1)
}

// reduced is the expected reduction of element i over all ranks.
func (b *bench[T]) reduced(i int) float64 {
	acc := b.input(0, i)
	for r := 1; r < b.n; r++ {
		v := b.input(r, i)
		switch b.op {
		case collectives.Sum, collectives.Avg:
			acc += v
		case collectives.Prod:
			acc *= v
		case collectives.Min:
			acc = math.Min(acc, v)
		case collectives.Max:
			acc = math.Max(acc, v)
		}
	}
	if b.op == collectives.Avg {
		acc /= float64(b.n)
		if integer[T]() {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

// fill sets the send buffer to this rank's input and clears the receive
// buffer.
func (b *bench[T]) fill() {
	off := 0
	if b.cfg.Collective == "allgather" {
		off = b.r * b.per // rank r contributes its block of the whole
	}
	for i := range b.send {
		b.send[i] = from[T](b.input(b.r, off+i))
	}
	clear(b.recv)
	if b.cfg.Collective == "broadcast" && b.r != b.cfg.Root {
		clear(b.send)
	}
}

// verify counts this rank's wrong elements after one run from fill.
func (b *bench[T]) verify() int {
	wrong := 0
	check := func(got T, want float64) {
		if !near[T](to(got), want) {
			wrong++
		}
	}
	switch b.cfg.Collective {
	case "allreduce":
		for i, v := range b.send {
			check(v, b.reduced(i))
		}
	case "reduce":
		if b.r == b.cfg.Root {
			for i, v := range b.send {
				check(v, b.reduced(i))
			}
		}
	case "broadcast":
		for i, v := range b.send {
			check(v, b.input(b.cfg.Root, i))
		}
	case "allgather":
		for i, v := range b.recv {
			check(v, b.input(i/max(b.per, 1), i))
		}
	case "reducescatter":
		for k, v := range b.recv {
			check(v, b.reduced(b.r*b.per+k))
		}
	case "alltoall":
		for i, v := range b.recv {
			j, k := i/max(b.per, 1), i%max(b.per, 1)
			check(v, b.input(j, b.r*b.per+k))
		}
	case "sendrecv":
		left := (b.r + b.n - 1) % b.n
		for i, v := range b.recv {
			check(v, b.input(left, i))
		}
	}
	return wrong
}

func integer[T collectives.Element]() bool {
	switch collectives.DTypeOf[T]() {
	case collectives.Int32, collectives.Int64, collectives.Uint8:
		return true
	}
	return false
}

// near compares with the precision of T: exact for integers, a relative
// 1e-6 for float32 and float64, 1e-2 for the 16-bit floats.
func near[T collectives.Element](got, want float64) bool {
	tol := 0.0
	switch collectives.DTypeOf[T]() {
	case collectives.Float32, collectives.Float64:
		tol = 1e-6
	case collectives.BF16, collectives.FP16:
		tol = 1e-2
	}
	return math.Abs(got-want) <= tol*math.Abs(want)
}

func from[T collectives.Element](v float64) T {
	var z T
	switch p := any(&z).(type) {
	case *float32:
		*p = float32(v)
	case *float64:
		*p = v
	case *int32:
		*p = int32(v)
	case *int64:
		*p = int64(v)
	case *uint8:
		*p = uint8(v)
	case *collectives.BFloat16:
		*p = collectives.BFloat16FromFloat32(float32(v))
	case *collectives.Float16:
		*p = collectives.Float16FromFloat32(float32(v))
	}
	return z
}

func to[T collectives.Element](v T) float64 {
	switch x := any(v).(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint8:
		return float64(x)
	case collectives.BFloat16:
		return float64(x.Float32())
	case collectives.Float16:
		return float64(x.Float32())
	}
	return math.NaN()
}
