package collbench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// EnvConfig carries a `gorun bench` rank's Config, as JSON, from the head
// to every rank.
const EnvConfig = "GORUN_BENCH_CONFIG"

// RankCommand is the gorun-tools command of a `gorun bench` rank, which
// gorun launches as the job's program (gorun-tools bench-rank).
const RankCommand = "bench-rank"

// ResultPrefix starts the line in which rank 0 reports one size's Result,
// as JSON, on its standard output; [Collector] picks these lines out of
// the job's output.
const ResultPrefix = "#gorun-bench-result "

// Collectives lists the names Config.Collective accepts.
var Collectives = []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier"}

// DTypes lists the names Config.DType accepts.
var DTypes = []string{"float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16"}

// DeviceCollectives lists the collectives Config.Device runs.
var DeviceCollectives = []string{"allreduce", "reducescatter", "allgather", "broadcast"}

// All, as Config.Collective, runs every collective in turn.
const All = "all"

// ElemSize returns the size in bytes of an element of the named type (one
// of DTypes), or 0.
func ElemSize(dtype string) int {
	switch dtype {
	case "float64", "int64":
		return 8
	case "float32", "int32":
		return 4
	case "bfloat16", "float16":
		return 2
	case "uint8":
		return 1
	}
	return 0
}

// InfoPrefix starts the line in which rank 0 says, as a JSON Header, what
// the job it measures looks like (ranks, hosts, transports), before the
// first result.
const InfoPrefix = "#gorun-bench-info "

// Ops lists the names Config.Op accepts.
var Ops = []string{"sum", "prod", "min", "max", "avg"}

// Config is what one benchmark run measures.
type Config struct {
	Collective string  // one of Collectives
	Op         string  // one of Ops; "" means sum
	DType      string  // one of DTypes; "" means float32
	Sizes      []int64 // message sizes in bytes, as nccl-tests counts them
	Iters      int     // timed iterations per size (0: 20)
	Warmup     int     // untimed iterations before them (0: 5; negative: none)
	// MinTime, when positive, sets the iterations per size instead of
	// Iters: enough for a block to last about MinTime, from the time of
	// one probe iteration (the slowest rank's).
	MinTime time.Duration
	// Blocks is the number of timed blocks per size (0: 1); the result is
	// the median block's time.
	Blocks int
	Check  bool // check each size's result against a serial computation
	// AllTypes runs every element type, and every operator of the
	// reductions, instead of DType and Op.
	AllTypes bool
	Root     int // Broadcast's and Reduce's root
	// Device, when not "", runs the collective on device buffers of the
	// world's device plugin of that name ("cuda"), as nccl-tests does:
	// allreduce, reducescatter, allgather or broadcast; the reductions on
	// float32, float16 or bfloat16, with sum, min or max.
	Device string `json:",omitempty"`
	// Out receives rank 0's result lines (ResultPrefix and JSON); nil
	// means none are written.
	Out io.Writer `json:"-"`
}

// Validate checks the names and numbers in cfg.
func (cfg *Config) Validate() error {
	if !member(Collectives, cfg.Collective) && cfg.Collective != All {
		return fmt.Errorf("collbench: collective %q: want one of %s, or %s", cfg.Collective, strings.Join(Collectives, ", "), All)
	}
	if cfg.Op != "" && !member(Ops, cfg.Op) {
		return fmt.Errorf("collbench: operator %q: want one of %s", cfg.Op, strings.Join(Ops, ", "))
	}
	if cfg.DType != "" && !member(DTypes, cfg.DType) {
		return fmt.Errorf("collbench: data type %q: want one of %s", cfg.DType, strings.Join(DTypes, ", "))
	}
	if cfg.Iters < 0 {
		return fmt.Errorf("collbench: %d iterations: must not be negative", cfg.Iters)
	}
	if cfg.Device != "" {
		switch {
		case !member(DeviceCollectives, cfg.Collective):
			return fmt.Errorf("collbench: on device buffers (--device %s): %s only, not %s", cfg.Device, strings.Join(DeviceCollectives, ", "), cfg.Collective)
		case cfg.AllTypes:
			return fmt.Errorf("collbench: on device buffers (--device %s): one type and operator at a time", cfg.Device)
		case Reduction(cfg.Collective) && !member([]string{"", "float32", "float16", "bfloat16"}, cfg.DType):
			return fmt.Errorf("collbench: %s on device buffers (--device %s): float32, float16 or bfloat16, not %s", cfg.Collective, cfg.Device, cfg.DType)
		case Reduction(cfg.Collective) && !member([]string{"", "sum", "min", "max"}, cfg.Op):
			return fmt.Errorf("collbench: %s on device buffers (--device %s): sum, min or max, not %s", cfg.Collective, cfg.Device, cfg.Op)
		}
	}
	return nil
}

func member(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Reduction reports whether the collective coll reduces: allreduce,
// reduce and reducescatter.
func Reduction(coll string) bool {
	return coll == "allreduce" || coll == "reduce" || coll == "reducescatter"
}
