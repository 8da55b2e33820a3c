package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/cuda/cu"
	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/plugins/sdk/sdktest"
)

// bin is the plugin, built with the fake driver beside it (2 GPUs). With
// CU_TEST_REAL=1 the tests use the machine's driver, and
// GORUN_CUDA_TEST_PLUGIN names a plugin built already (scripts/gpu-check.sh
// carries both to a GPU machine, which may have no Go or C compiler).
var bin string

var real = os.Getenv("CU_TEST_REAL") == "1"

func TestMain(m *testing.M) {
	if real {
		bin = os.Getenv("GORUN_CUDA_TEST_PLUGIN")
		if bin == "" {
			panic("CU_TEST_REAL=1 needs GORUN_CUDA_TEST_PLUGIN, the plugin's path")
		}
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "cuda-plugin-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, plugins.BinaryPrefix+"cuda")
	lib := filepath.Join(dir, "libfakecuda.so")
	for _, c := range [][]string{
		{"go", "build", "-o", bin, "."},
		{"cc", "-shared", "-fPIC", "-O2", "-o", lib, "fakecuda/fakecuda.c", "-lm"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			os.Stderr.Write(out)
			panic("building: " + strings.Join(c, " ") + ": " + err.Error())
		}
	}
	os.Setenv(cu.EnvDriver, lib)
	os.Setenv("FAKECUDA_DEVICES", "2")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// openMemory starts the plugin as rank localRank of a host.
func openMemory(t *testing.T, localRank int) *plugins.Memory {
	t.Helper()
	c, err := plugins.Open(plugins.Options{Path: bin, Rank: localRank, Size: 2, LocalRank: localRank, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := c.Memory()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func f32s(xs ...float32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// Two ranks' plugins: one writes its GPU memory and exports it, the other
// imports it, copies from it and reduces into its own.
func TestMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := openMemory(t, 0), openMemory(t, 1)
	pa, err := a.Alloc(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Write(ctx, pa, 0, f32s(1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	h, err := a.Export(ctx, pa)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := b.Import(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.Alloc(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, pb, 0, f32s(10, 20, 30, 40)); err != nil {
		t.Fatal(err)
	}
	if err := b.Reduce(ctx, "sum", "float32", pb, 4, peer, 4, 3); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if err := b.Read(ctx, got, pb, 0); err != nil || !bytes.Equal(got, f32s(10, 22, 33, 44)) {
		t.Errorf("after the reduction: %v %v", got, err)
	}
	if err := b.Copy(ctx, pb, 0, peer, 12, 4); err != nil {
		t.Fatal(err)
	}
	if err := b.Read(ctx, got[:4], pb, 0); err != nil || !bytes.Equal(got[:4], f32s(4)) {
		t.Errorf("after the copy: %v %v", got[:4], err)
	}
	if err := b.Write(ctx, pb, 8, make([]byte, 9)); err == nil || !strings.Contains(err.Error(), "offset 8 of a 16-byte allocation") {
		t.Errorf("a write past the end = %v", err)
	}
	if err := b.Reduce(ctx, "sum", "int32", pb, 0, pb, 0, 1); err == nil || !strings.Contains(err.Error(), "int32") {
		t.Errorf("a reduction on int32 = %v", err)
	}
	if err := b.Free(ctx, peer); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(ctx, peer); err == nil {
		t.Error("a second free of an import succeeded")
	}
}

// gorun plugins list shows the GPUs, the rank's marked.
func TestDevices(t *testing.T) {
	info, devs, err := plugins.Inspect(context.Background(), bin, plugins.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if real {
		t.Logf("%+v %+v", info, devs)
		if !info.Memory || len(devs) == 0 || !strings.Contains(devs[0].Note, "selected") {
			t.Error("no GPU, or GPU 0 not selected")
		}
		return
	}
	if !info.Memory || info.Transport || len(devs) != 2 || devs[0].Name != "cuda0" || devs[1].PCI != "0000:02:00.0" ||
		!strings.Contains(devs[0].Note, "selected") || strings.Contains(devs[1].Note, "selected") {
		t.Errorf("Inspect: %+v %+v", info, devs)
	}
}

// Without a driver the plugin fails to start, saying which library it
// could not load.
func TestNoDriver(t *testing.T) {
	t.Setenv(cu.EnvDriver, "/nonexistent/libcuda.so.1")
	_, err := plugins.Open(plugins.Options{Path: bin, Rank: -1, Size: -1, LocalRank: -1, Log: os.Stderr})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Errorf("Open without a driver = %v", err)
	}
}

// The memory passes the SDK's device memory contract in this process.
func TestMemoryContract(t *testing.T) {
	sdktest.RunMemory(t, func(t *testing.T) sdk.Memory {
		m, err := newMemory(sdk.Config{Rank: -1, Size: -1, LocalRank: 1})
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

// BenchmarkCopy measures device-to-device copies of 256 MiB (16 MiB on the
// fake) through the plugin, one control call each: compare with package
// cu's BenchmarkCopy (cuMemcpyDtoD itself) on a GPU machine.
func BenchmarkCopy(b *testing.B) {
	c, err := plugins.Open(plugins.Options{Path: bin, Rank: -1, Size: -1, LocalRank: -1, Log: os.Stderr})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	m, err := c.Memory()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	n := 256 << 20
	if !real {
		n = 16 << 20
	}
	src, err := m.Alloc(ctx, n)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := m.Alloc(ctx, n)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n))
	for b.Loop() {
		if err := m.Copy(ctx, dst, 0, src, 0, n); err != nil {
			b.Fatal(err)
		}
	}
}
