package collectives_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorun/gorun/collectives"
)

var cudaBins struct {
	once     sync.Once
	dir, lib string
	plugin   string
	err      error
}

// cudaPlugin builds the CUDA plugin and the fake driver (4 GPUs) once per
// test binary, and points the plugins this test starts at the fake.
func cudaPlugin(t *testing.T) string {
	t.Helper()
	cudaBins.once.Do(func() {
		if cudaBins.dir, cudaBins.err = os.MkdirTemp("", "coll-cuda"); cudaBins.err != nil {
			return
		}
		cudaBins.plugin = filepath.Join(cudaBins.dir, "gorun-plugin-cuda")
		cudaBins.lib = filepath.Join(cudaBins.dir, "libfakecuda.so")
		for _, c := range [][]string{
			{"go", "build", "-o", cudaBins.plugin, "github.com/gorun/gorun/plugins/cuda"},
			{"cc", "-shared", "-fPIC", "-O2", "-o", cudaBins.lib, "../plugins/cuda/fakecuda/fakecuda.c", "-lm"},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				cudaBins.err = fmt.Errorf("%v: %v\n%s", c, err, out)
				return
			}
		}
	})
	if cudaBins.err != nil {
		t.Fatal(cudaBins.err)
	}
	t.Setenv("GORUN_CUDA_DRIVER", cudaBins.lib)
	t.Setenv("FAKECUDA_DEVICES", "4")
	return cudaBins.plugin
}

// element i of rank r's input: small integers, exact in every type and in
// any order of summation.
func deviceInput(r, i int) float32 { return float32((r*7+i*3)%23 - 11) }

func encodeAs(dtype collectives.DType, xs []float32) []byte {
	var b []byte
	for _, x := range xs {
		switch dtype {
		case collectives.Float32:
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		case collectives.FP16:
			b = binary.LittleEndian.AppendUint16(b, uint16(collectives.Float16FromFloat32(x)))
		case collectives.BF16:
			b = binary.LittleEndian.AppendUint16(b, uint16(collectives.BFloat16FromFloat32(x)))
		}
	}
	return b
}

// Four ranks with a GPU each (fake) run the device collectives on one
// host (through each other's mapped buffers) and on two (allreduce in
// three phases: on the devices inside each host, through host memory over
// TCP or a transport plugin given beside the device one across them, on
// the devices again; the others, and hosts of unequal ranks, through host
// memory):
// allreduce and reducescatter for every type and operator, allreduce at
// lengths that leave some ranks no part, allgather and broadcast; every
// rank ends with the serial result.
func TestDeviceCollectives(t *testing.T) {
	bin := cudaPlugin(t)
	tcpx := pluginBin(t, "tcpexample")
	for _, tc := range []struct {
		name   string
		hosts  []int
		plugin string // the transport plugin beside the device one
		over   string // the transports, as Communicator.Transports says ("": not checked)
	}{
		{"one host", nil, "", "shm"},
		{"two hosts", []int{0, 0, 1, 1}, "", "shm+tcp"},
		{"uneven hosts", []int{0, 0, 0, 1}, "", ""}, // rank 3 alone has tcp only
		{"two hosts over a transport plugin", []int{0, 0, 1, 1}, tcpx, "shm+tcpexample"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := pluginWorld(t, 4, collectives.Setup{Device: bin, Plugin: tc.plugin}, tc.hosts, func(c *collectives.Communicator) error {
				ctx := context.Background()
				if got := c.Transports(); tc.over != "" && got != tc.over {
					return fmt.Errorf("transports %q, want %q", got, tc.over)
				}
				for _, dtype := range []collectives.DType{collectives.Float32, collectives.FP16, collectives.BF16} {
					for _, op := range []collectives.Op{collectives.Sum, collectives.Min, collectives.Max} {
						for _, count := range []int{1, 3, 1000, 100003} {
							if err := deviceCheck(ctx, c, "allreduce", dtype, op, count); err != nil {
								return err
							}
						}
						for _, count := range []int{4, 4000} {
							if err := deviceCheck(ctx, c, "reducescatter", dtype, op, count); err != nil {
								return err
							}
						}
					}
					for _, count := range []int{4, 4000} {
						if err := deviceCheck(ctx, c, "allgather", dtype, 0, count); err != nil {
							return err
						}
					}
				}
				for _, count := range []int{1, 100003} {
					if err := deviceCheck(ctx, c, "broadcast", collectives.Float32, 0, count); err != nil {
						return err
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Without a device plugin, or with what the GPU cannot reduce, the device
// calls fail with errors that say so.
func TestDeviceErrors(t *testing.T) {
	bin := cudaPlugin(t)
	errs := pluginWorld(t, 2, collectives.Setup{}, nil, func(c *collectives.Communicator) error {
		if _, err := c.AllocDevice(context.Background(), 8); !errors.Is(err, collectives.ErrNoDevice) {
			return fmt.Errorf("AllocDevice without a plugin = %v", err)
		}
		return nil
	})
	for _, tc := range []struct {
		setup collectives.Setup
		want  string
	}{
		{collectives.Setup{Plugin: bin}, "a device plugin goes in --device"},
		{collectives.Setup{Device: pluginBin(t, "tcpexample")}, "manages no device memory"},
	} {
		for r, err := range pluginWorld(t, 2, tc.setup, nil, func(c *collectives.Communicator) error { return nil }) {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: rank %d: %v, want %q", tc.setup, r, err, tc.want)
			}
		}
	}
	errs = append(errs, pluginWorld(t, 2, collectives.Setup{Device: bin}, nil, func(c *collectives.Communicator) error {
		ctx := context.Background()
		b, err := c.AllocDevice(ctx, 16)
		if err != nil {
			return err
		}
		defer b.Free(ctx)
		if err := collectives.AllReduceDevice(ctx, c, b, collectives.Float64, collectives.Sum); !errors.Is(err, collectives.ErrInvalid) {
			return fmt.Errorf("float64 = %v", err)
		}
		if err := collectives.AllReduceDevice(ctx, c, b, collectives.Float32, collectives.Prod); !errors.Is(err, collectives.ErrInvalid) {
			return fmt.Errorf("prod = %v", err)
		}
		if err := b.Write(ctx, 12, make([]byte, 8)); !errors.Is(err, collectives.ErrInvalid) {
			return fmt.Errorf("a write past the end = %v", err)
		}
		return nil
	})...)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// deviceCheck runs one device collective on this rank's input and
// compares the buffer with the serial result (for reducescatter, the
// rank's part; for broadcast, root 2's buffer).
func deviceCheck(ctx context.Context, c *collectives.Communicator, coll string, dtype collectives.DType, op collectives.Op, count int) error {
	n, r := c.Size(), c.Rank()
	lo, hi := r*count/n, (r+1)*count/n // this rank's part
	const root = 2
	in, want := make([]float32, count), make([]float32, count)
	for i := range in {
		in[i] = deviceInput(r, i)
		switch coll {
		case "allgather":
			want[i] = deviceInput(i*n/count, i) // from the part's owner
		case "broadcast":
			want[i] = deviceInput(root, i)
		default:
			for q := range n {
				x := deviceInput(q, i)
				switch {
				case q == 0:
					want[i] = x
				case op == collectives.Sum:
					want[i] += x
				case op == collectives.Min:
					want[i] = min(want[i], x)
				default:
					want[i] = max(want[i], x)
				}
			}
		}
	}
	b, err := c.AllocDevice(ctx, count*dtype.Size())
	if err != nil {
		return err
	}
	defer b.Free(ctx)
	if err := b.Write(ctx, 0, encodeAs(dtype, in)); err != nil {
		return err
	}
	switch coll {
	case "allreduce":
		err = collectives.AllReduceDevice(ctx, c, b, dtype, op)
	case "reducescatter":
		err = collectives.ReduceScatterDevice(ctx, c, b, dtype, op)
		want, lo = want[lo:hi], lo*dtype.Size()
	case "allgather":
		err = collectives.AllGatherDevice(ctx, c, b, dtype)
	case "broadcast":
		err = collectives.BroadcastDevice(ctx, c, b, root)
	}
	if coll != "reducescatter" {
		lo = 0
	}
	if err != nil {
		return fmt.Errorf("%s %s %s, %d elements: %w", coll, op, dtype, count, err)
	}
	got := make([]byte, len(want)*dtype.Size())
	if err := b.Read(ctx, lo, got); err != nil {
		return err
	}
	if string(got) != string(encodeAs(dtype, want)) {
		return fmt.Errorf("%s %s %s, %d elements: not the serial result", coll, op, dtype, count)
	}
	return nil
}
