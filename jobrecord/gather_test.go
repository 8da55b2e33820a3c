package jobrecord

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// TestGather runs Gather on this machine: it must find this kernel, and
// the versions of the MPI implementations and the Python installed here,
// as their own tools print them, quickly.
func TestGather(t *testing.T) {
	t.Parallel()
	rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Skip("no /proc/sys/kernel/osrelease")
	}
	info := Gather(context.Background(), "1.2.3")
	t.Logf("Gather took %v; notes %q", info.Took, info.Notes)
	host, _ := os.Hostname()
	if info.Host != host || info.GorunVersion != "1.2.3" || info.CPUs < 1 || info.MemKB <= 0 {
		t.Errorf("Gather = host %q version %q cpus %d mem %d KiB, want host %q, version 1.2.3 and some CPUs and memory",
			info.Host, info.GorunVersion, info.CPUs, info.MemKB, host)
	}
	if !strings.HasPrefix(info.Kernel, strings.TrimSpace(string(rel))+" #") {
		t.Errorf("Kernel = %q, want uname -r (%s) and uname -v", info.Kernel, strings.TrimSpace(string(rel)))
	}
	if len(info.Env) == 0 || len(info.Notes) != 0 {
		t.Errorf("Gather: %d variables, notes %q; want the environment and no notes", len(info.Env), info.Notes)
	}
	for _, tt := range []struct{ tool, pkg, key, want string }{
		{"mpichversion", "mpich", "mpich", "MPICH Version:"},
		{"ompi_info", "openmpi-bin", "openmpi", "Open MPI v"},
	} {
		path, ok := testenv.HaveTool(t, tt.tool, tt.pkg)
		if !ok {
			continue
		}
		args := map[string][]string{"ompi_info": {"--version"}}[tt.tool]
		out, err := exec.Command(path, args...).Output()
		if err != nil {
			t.Fatalf("%s: %v", tt.tool, err)
		}
		v := info.MPI[tt.key]
		if v == "" || !strings.Contains(string(out), tt.want) || !strings.Contains(firstLine(strings.SplitAfter(string(out), tt.want)[1]), v) {
			t.Errorf("MPI[%q] = %q; %s prints %q", tt.key, v, tt.tool, firstLine(string(out)))
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		out, _ := exec.Command(p, "--version").Output()
		if v, _, _ := strings.Cut(info.Python, " "); v == "" || "Python "+v != strings.TrimSpace(string(out)) {
			t.Errorf("Python = %q; %s --version prints %q", info.Python, p, out)
		}
	}
	if info.Took > time.Second {
		t.Errorf("Gather took %v: it must be quick (about 10-50 ms)", info.Took)
	}
}

// TestGatherFiles reads a recorded GPU host's files: the driver, CUDA,
// NCCL (through the link the loader follows), the OS and the kernel.
func TestGatherFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/sys/kernel/osrelease", "5.15.0-91-generic\n")
	write("proc/sys/kernel/version", "#101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023\n")
	write("etc/os-release", "NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 22.04.3 LTS\"\nID=ubuntu\n")
	write("proc/meminfo", "MemTotal:       2113459388 kB\nMemFree:        12 kB\n")
	write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n")
	write("usr/local/cuda/version.json", `{"cuda" : {"name" : "CUDA SDK", "version" : "12.2.2"}, "cuda_cudart" : {"version" : "12.2.140"}}`)
	write("usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3", "")
	if err := os.Symlink("libnccl.so.2.18.3", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	var info HostInfo
	files(&info, root, nil)
	want := HostInfo{Kernel: "5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023", OS: "Ubuntu 22.04.3 LTS",
		MemKB: 2113459388, Driver: "535.104.05", CUDA: "12.2.2", NCCL: "2.18.3"}
	if info.Kernel != want.Kernel || info.OS != want.OS || info.MemKB != want.MemKB || info.Driver != want.Driver || info.CUDA != want.CUDA || info.NCCL != want.NCCL {
		t.Errorf("files =\n%+v\nwant\n%+v", info, want)
	}
	// A library directory of LD_LIBRARY_PATH comes first, as for the loader.
	lib := filepath.Join(root, "opt/nccl/lib")
	write("opt/nccl/lib/libnccl.so.2", "")
	write("opt/nccl/lib/libnccl.so.2.21.5", "")
	if got := findNCCL(root, []string{"relative/ignored", lib}); got != "2.21.5" {
		t.Errorf("findNCCL with LD_LIBRARY_PATH=%s = %q, want 2.21.5", lib, got)
	}
}

func TestParsers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
		parse          func(string) string
	}{
		{"driver", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n", "550.54.15", parseNVIDIADriver},
		{"driver aarch64", "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.35.03  Release Build  (dvs-builder@U16-I2-C04-12-4)  Fri Aug 16 21:42:42 UTC 2024\n", "560.35.03", parseNVIDIADriver},
		{"no driver", "", "", parseNVIDIADriver},
		{"cuda txt", "CUDA Version 10.2.89\n", "10.2.89", func(s string) string { return parseCUDAVersion("", s) }},
		{"cuda neither", "", "", func(s string) string { return parseCUDAVersion("{", s) }},
		{"os-release unquoted", "PRETTY_NAME=Arch\n", "Arch", parseOSRelease},
		{"os-release single quotes", "PRETTY_NAME='Rocky Linux 9.3 (Blue Onyx)'\n", "Rocky Linux 9.3 (Blue Onyx)", parseOSRelease},
		{"mpich", "MPICH Version:    \t4.0.2\nMPICH Release date:\tThu Apr  7\n", "mpich 4.0.2", kv(parseMPICHVersion)},
		{"mvapich", "MVAPICH2 Version:     \t2.3.7\n", "mvapich2 2.3.7", kv(parseMPICHVersion)},
		{"openmpi 5", "Open MPI v5.0.3\n\nhttps://www.open-mpi.org/community/help/\n", "openmpi 5.0.3", kv(parseOMPIInfo)},
		{"not openmpi", "ompi_info: error while loading shared libraries\n", " ", kv(parseOMPIInfo)},
		{"python", "Python 3.12.1\n", "python 3.12.1", kv(parsePython)},
	} {
		if got := tt.parse(tt.in); got != tt.want {
			t.Errorf("%s: parse(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func kv(parse func(string) (string, string)) func(string) string {
	return func(s string) string { k, v := parse(s); return k + " " + v }
}

// BenchmarkGather measures Gather on this machine (its wall time is what
// an agent adds to a --record job).
func BenchmarkGather(b *testing.B) {
	for b.Loop() {
		Gather(context.Background(), "dev")
	}
}
