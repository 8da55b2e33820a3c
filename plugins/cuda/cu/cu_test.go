//go:build cgo && linux

package cu

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/collectives"
)

// The tests run against the fake driver (../fakecuda), built here with
// the C compiler: 3 GPUs of 64 MiB. With CU_TEST_REAL=1 they run against
// the machine's driver instead (scripts/gpu-check.sh, on a GPU machine),
// and the checks that only the fake's devices can meet are left out. The
// test binary re-runs itself as the other process of an IPC test, and to
// open drivers that fail.
const (
	envChild = "CU_TEST_CHILD" // "ipc HANDLE" or "open PATH"
	envReal  = "CU_TEST_REAL"
	fakeMem  = 64 << 20
)

// real says the tests run on the machine's driver.
var real = os.Getenv(envReal) == "1"

func TestMain(m *testing.M) {
	if v := os.Getenv(envChild); v != "" {
		os.Exit(child(v))
	}
	if real {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "cu-test")
	if err != nil {
		panic(err)
	}
	lib := filepath.Join(dir, "libfakecuda.so")
	out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-Wall", "-o", lib, "../fakecuda/fakecuda.c", "-lm").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake CUDA driver (a C compiler is needed: apt-get install gcc): %v\n%s", err, out)
		os.Exit(1)
	}
	os.Setenv(EnvDriver, lib)
	os.Setenv("FAKECUDA_DEVICES", "3")
	os.Setenv("FAKECUDA_MEMORY", fmt.Sprint(fakeMem))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// child is the other process: it maps an IPC handle, checks the pattern
// the parent wrote and overwrites the first half; or it opens a driver
// and prints the error.
func child(v string) int {
	what, arg, _ := strings.Cut(v, " ")
	if what == "open" {
		_, err := Open(arg)
		fmt.Println(err)
		return 0
	}
	d, err := Open("")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	devs, err := d.Devices()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	c, err := d.Context(min(1, len(devs)-1)) // another GPU where there is one
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var h IpcHandle
	b, _ := hex.DecodeString(arg)
	copy(h[:], b)
	p, err := c.OpenIpc(h)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	got := make([]byte, 1<<20)
	if err := c.CopyFromDevice(got, p); err != nil || !bytes.Equal(got, pattern(len(got))) {
		fmt.Println("the mapped memory does not hold the parent's pattern:", err)
		return 1
	}
	if err := c.CopyToDevice(p, bytes.Repeat([]byte{0xab}, len(got)/2)); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := c.CloseIpc(p); err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func mustOpen(t testing.TB) *Driver {
	t.Helper()
	d, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// open returns the context of GPU ordinal (of the last GPU, on a real
// machine with fewer).
func open(t testing.TB, ordinal int) *Context {
	t.Helper()
	d := mustOpen(t)
	if real {
		devs, err := d.Devices()
		if err != nil || len(devs) == 0 {
			t.Fatalf("no GPU: %v", err)
		}
		ordinal = min(ordinal, len(devs)-1)
	}
	c, err := d.Context(ordinal)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDevices(t *testing.T) {
	d, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := d.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if real {
		t.Logf("driver %s, CUDA %d; GPUs %+v", d.Path, d.Version, devs)
		if len(devs) == 0 {
			t.Error("the driver sees no GPU")
		}
		return
	}
	if d.Version != 12040 || d.Path != os.Getenv(EnvDriver) {
		t.Errorf("driver %+v", d)
	}
	want := []Device{
		{0, "gorun fake GPU", "0000:01:00.0", fakeMem},
		{1, "gorun fake GPU", "0000:02:00.0", fakeMem},
		{2, "gorun fake GPU", "0000:03:00.0", fakeMem},
	}
	if fmt.Sprint(devs) != fmt.Sprint(want) {
		t.Errorf("Devices() = %v, want %v", devs, want)
	}
	if _, err := d.Context(len(want)); err == nil || !strings.Contains(err.Error(), "GPU 3") || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_DEVICE") {
		t.Errorf("Context(3) = %v", err)
	}
}

// Memory goes in and out, and between allocations; copies past an
// allocation's end, and allocations beyond the GPU's memory, are errors
// that name the call and the GPU.
func TestMemory(t *testing.T) {
	c := open(t, 0)
	const n = 3<<20 + 5
	a, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(a)
	b, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(n)
	if err := c.CopyToDevice(a, want); err != nil {
		t.Fatal(err)
	}
	if err := c.Copy(b, a, n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := c.CopyFromDevice(got, b); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("round trip through two allocations: %v (equal %v)", err, bytes.Equal(got, want))
	}
	if err := c.CopyFromDevice(make([]byte, n+1), b); err == nil || !strings.Contains(err.Error(), "cuMemcpyDtoH") {
		t.Errorf("copy past the end = %v", err)
	}
	if err := c.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(b); err == nil {
		t.Error("a second Free succeeded")
	}
	total := uint64(fakeMem)
	if real {
		devs, _ := mustOpen(t).Devices()
		total = devs[0].Memory
	}
	_, err = c.Alloc(int(2 * total))
	if !OutOfMemory(err) || !strings.Contains(err.Error(), "GPU 0") || !strings.Contains(err.Error(), "cuMemAlloc") {
		t.Errorf("Alloc beyond the GPU's memory = %v", err)
	}
}

// Another process maps an allocation through its IPC handle, reads what
// this one wrote and writes what this one then reads. The process that
// made a handle cannot open it, as with CUDA.
func TestIpc(t *testing.T) {
	c := open(t, 0)
	const n = 1 << 20
	p, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(p)
	if err := c.CopyToDevice(p, pattern(n)); err != nil {
		t.Fatal(err)
	}
	h, err := c.IpcHandle(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenIpc(h); err == nil {
		t.Error("OpenIpc of this process's own handle succeeded")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=ipc "+hex.EncodeToString(h[:]))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	got := make([]byte, n)
	if err := c.CopyFromDevice(got, p); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte{0xab}, n/2), pattern(n)[n/2:]...)
	if !bytes.Equal(got, want) {
		t.Error("the other process's write is not here")
	}
}

// A driver that cannot be loaded, or lacks a function, is an error that
// names it (in a process of its own: a process loads one driver).
func TestOpenErrors(t *testing.T) {
	for path, want := range map[string]string{
		"/nonexistent/libcuda.so.1": "/nonexistent/libcuda.so.1",
		"libm.so.6":                 "libm.so.6: no function cuInit",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=open "+path)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "loading the CUDA driver") {
			t.Errorf("Open(%q): %v: %s", path, err, out)
		}
	}
	if _, err := Open("/another/libcuda.so"); err == nil || !strings.Contains(err.Error(), "is loaded") {
		t.Errorf("Open of a second driver = %v", err)
	}
}

// The reductions give what the collectives compute on the CPU, for every
// operation and element type, at lengths that leave partial blocks.
func TestReduce(t *testing.T) {
	c := open(t, 2)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dtype := range DTypes {
		for _, op := range Ops {
			for _, count := range []int{1, 1000, 70001} {
				a, b := make([]float32, count), make([]float32, count)
				for i := range a {
					a[i], b[i] = float32(rng.NormFloat64()*100), float32(rng.NormFloat64()*100)
				}
				da, want := encode(dtype, a), reference(dtype, op, a, b)
				x, y := alloc(t, c, da), alloc(t, c, encode(dtype, b))
				if err := c.Reduce(op, dtype, x, y, count); err != nil {
					t.Fatalf("%s %s: %v", op, dtype, err)
				}
				got := make([]byte, len(da))
				if err := c.CopyFromDevice(got, x); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s on %d %s: differs from the CPU's", op, count, dtype)
				}
				c.Free(x)
				c.Free(y)
			}
		}
	}
	if err := c.Reduce("prod", "float32", 0, 0, 1); err == nil || !strings.Contains(err.Error(), "no reduction prod") {
		t.Errorf("Reduce(prod) = %v", err)
	}
}

// BenchmarkCopy measures device-to-device copies of 256 MiB (16 MiB on
// the fake) on one GPU
// (cuMemcpyDtoD), the reference for the plugin's (plugins/cuda's
// BenchmarkCopy): run it with CU_TEST_REAL=1 on a GPU machine.
func BenchmarkCopy(b *testing.B) {
	c := open(b, 0)
	n := 256 << 20
	if !real {
		n = fakeMem / 4
	}
	src, err := c.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Free(src)
	dst, err := c.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Free(dst)
	b.SetBytes(int64(n))
	for b.Loop() {
		if err := c.Copy(dst, src, n); err != nil {
			b.Fatal(err)
		}
	}
}

func alloc(t *testing.T, c *Context, b []byte) Ptr {
	t.Helper()
	p, err := c.Alloc(len(b))
	if err == nil {
		err = c.CopyToDevice(p, b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// encode converts xs to dtype's bytes, as the collectives round.
func encode(dtype string, xs []float32) []byte {
	var out []byte
	for _, x := range xs {
		switch dtype {
		case "float32":
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(x))
		case "float16":
			out = binary.LittleEndian.AppendUint16(out, uint16(collectives.Float16FromFloat32(x)))
		case "bfloat16":
			out = binary.LittleEndian.AppendUint16(out, uint16(collectives.BFloat16FromFloat32(x)))
		}
	}
	return out
}

// reference computes op(a, b) element by element on the CPU, each
// operand first rounded to dtype and the result rounded back.
func reference(dtype, op string, a, b []float32) []byte {
	round := func(x float32) float32 {
		switch dtype {
		case "float16":
			return collectives.Float16FromFloat32(x).Float32()
		case "bfloat16":
			return collectives.BFloat16FromFloat32(x).Float32()
		}
		return x
	}
	out := make([]float32, len(a))
	for i := range a {
		x, y := round(a[i]), round(b[i])
		switch op {
		case "sum":
			out[i] = x + y
		case "min":
			out[i] = min(x, y)
		case "max":
			out[i] = max(x, y)
		}
	}
	return encode(dtype, out)
}

// The module has a kernel for every operation and type, each a
// well-formed entry (the fake driver only reads the entries' names; the
// GPU check compiles the text on a real GPU).
func TestPTX(t *testing.T) {
	ptx := PTX()
	for _, dtype := range DTypes {
		for _, op := range Ops {
			name, _, _ := kernelName(op, dtype)
			if strings.Count(ptx, ".visible .entry "+name+"(") != 1 {
				t.Errorf("no entry %s", name)
			}
		}
	}
	if strings.Count(ptx, "{") != strings.Count(ptx, "}") || strings.Count(ptx, ".entry") != len(DTypes)*len(Ops) {
		t.Error("unbalanced braces or extra entries")
	}
}
