package jobrecord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/procfs"
)

// HostInfo is what a host says about itself for a job record: the
// versions that most often explain a rank that fails on one host only,
// and its environment.
type HostInfo struct {
	// Host is the host's name in the plan; Hostname is what its kernel
	// calls itself.
	Host     string `json:"host"`
	Hostname string `json:"hostname,omitempty"`
	// GorunVersion is the version of the host's gorun (its agent).
	GorunVersion string `json:"gorun_version,omitempty"`
	// Kernel is uname -r and uname -v: "6.1.0-13-amd64 #1 SMP
	// PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)".
	Kernel string `json:"kernel,omitempty"`
	// OS is PRETTY_NAME of /etc/os-release: "Debian GNU/Linux 12
	// (bookworm)".
	OS string `json:"os,omitempty"`
	// Arch is the architecture gorun was built for (GOARCH).
	Arch string `json:"arch,omitempty"`
	// CPUs are the CPUs the agent may run on; MemKB is the host's
	// memory (MemTotal), KiB.
	CPUs  int   `json:"cpus,omitempty"`
	MemKB int64 `json:"mem_kb,omitempty"`
	// Driver is the NVIDIA driver's version, from
	// /proc/driver/nvidia/version; "" without one.
	Driver string `json:"driver,omitempty"`
	// CUDA is the version of the CUDA toolkit in /usr/local/cuda; "" when
	// there is none.
	CUDA string `json:"cuda,omitempty"`
	// NCCL is the version of the libnccl.so.2 the dynamic loader would
	// find first (LD_LIBRARY_PATH, then the CUDA and system library
	// directories), from its file name; "" when there is none.
	NCCL string `json:"nccl,omitempty"`
	// MPI maps the MPI implementations found in PATH to their versions:
	// "mpich" (or "mvapich2", as mpichversion names it), "openmpi"
	// (ompi_info); and "mpirun" to the file that mpirun in PATH is, links
	// followed (/usr/bin/mpirun.openmpi), which says whose mpirun a
	// plain mpirun is.
	MPI map[string]string `json:"mpi,omitempty"`
	// Python is the version of python3 in PATH, followed by its path
	// when that is not /usr/bin/python3: "3.11.7
	// (/home/me/venv/bin/python3)".
	Python string `json:"python,omitempty"`
	// Env is the host's environment (the agent's, which its ranks
	// inherit), redacted (see [Redact]), sorted.
	Env []string `json:"env,omitempty"`
	// Interfaces are the host's network interfaces, by name, from
	// /sys/class/net: their MTUs, link speeds and states. The loopback
	// and the interfaces of containers, virtual machines and tunnels
	// (docker0, veth*, virbr0, ...: see [FindSkew]) are left out. Nil
	// where the host did not tell (an older gorun, no /sys).
	Interfaces []Iface `json:"interfaces,omitempty"`
	// EnvDiff is how Env differs from the head's, when the head filled
	// it (see [Record.DiffEnv]).
	EnvDiff *EnvDiff `json:"env_diff,omitempty"`
	// Took is how long [Gather] took.
	Took time.Duration `json:"took_ns,omitempty"`
	// Notes say what could not be found out, and why ("ompi_info
	// --version: timed out after 1s"), or why there is no information at
	// all.
	Notes []string `json:"notes,omitempty"`
}

// ToolTimeout bounds each program that [Gather] runs.
const ToolTimeout = time.Second

// A tool is a program that Gather runs for a version, and how to read its
// output.
type tool struct {
	argv  []string
	parse func(out string) (key, version string)
}

// tools are the programs Gather runs, in parallel, where PATH has them.
// Each takes a few milliseconds (mpichversion, ompi_info --version); a
// python3 that is a pyenv shim, tens.
var tools = []tool{
	{[]string{"mpichversion"}, parseMPICHVersion},
	{[]string{"ompi_info", "--version"}, parseOMPIInfo},
	{[]string{"python3", "--version"}, parsePython},
}

// Gather describes this host: version is gorun's own. It reads a few
// files (/proc, /etc/os-release, /usr/local/cuda, /sys/class/net) and runs the programs
// that tell MPI's and Python's versions (mpichversion, ompi_info
// --version, python3 --version) in parallel, each bounded by ToolTimeout
// and by ctx; what it cannot find out is left empty, and what failed is
// in Notes. It takes about 8 ms on a machine with MPICH, Open MPI and
// Debian's python3 (70 ms where python3 is a pyenv shim, a shell script
// that runs pyenv), most of it waiting for the programs.
func Gather(ctx context.Context, version string) HostInfo {
	start := time.Now()
	host, _ := os.Hostname()
	info := HostInfo{Host: host, Hostname: host, GorunVersion: version, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}

	type answer struct {
		key, version, note string
	}
	answers := make(chan answer, len(tools))
	var wg sync.WaitGroup
	for _, t := range tools {
		path, err := exec.LookPath(t.argv[0])
		if err != nil {
			continue // not installed: nothing to say
		}
		wg.Go(func() {
			out, err := runTool(ctx, path, t.argv[1:])
			cmd := strings.Join(t.argv, " ")
			if err != nil {
				answers <- answer{note: cmd + ": " + err.Error()}
				return
			}
			k, v := t.parse(out)
			if v == "" {
				answers <- answer{note: fmt.Sprintf("%s: no version in its output %q", cmd, firstLine(out))}
				return
			}
			if k == "python" && path != "/usr/bin/python3" {
				v += " (" + path + ")"
			}
			answers <- answer{key: k, version: v}
		})
	}

	files(&info, "/", filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")))
	if p, err := exec.LookPath("mpirun"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		setMPI(&info, "mpirun", p)
	}
	info.Env = Redact(os.Environ())
	slices.Sort(info.Env)

	wg.Wait()
	close(answers)
	for a := range answers {
		switch {
		case a.note != "":
			info.Notes = append(info.Notes, a.note)
		case a.key == "python":
			info.Python = a.version
		default:
			setMPI(&info, a.key, a.version)
		}
	}
	slices.Sort(info.Notes)
	info.Took = time.Since(start)
	return info
}

func setMPI(info *HostInfo, key, v string) {
	if info.MPI == nil {
		info.MPI = map[string]string{}
	}
	info.MPI[key] = v
}

// runTool runs path with args, bounded by ToolTimeout, and returns its
// output, standard output and error together.
func runTool(ctx context.Context, path string, args []string) (string, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, ToolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = 100 * time.Millisecond // a child that keeps the pipe open
	out, err := cmd.CombinedOutput()
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("gave up after %v", time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(out) > 0 {
			return "", fmt.Errorf("%w: %s", err, firstLine(string(out)))
		}
		return "", err
	}
	return string(out), nil
}

// files fills in what info's files under root tell: the kernel, the OS,
// the memory, the NVIDIA driver, CUDA and NCCL (looked for in libPath,
// then in the usual directories), and the network interfaces.
func files(info *HostInfo, root string, libPath []string) {
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(root, name))
		return string(b)
	}
	rel, ver := strings.TrimSpace(read("proc/sys/kernel/osrelease")), strings.TrimSpace(read("proc/sys/kernel/version"))
	info.Kernel = strings.TrimSpace(rel + " " + ver)
	osr := read("etc/os-release")
	if osr == "" {
		osr = read("usr/lib/os-release")
	}
	info.OS = parseOSRelease(osr)
	info.MemKB = procfs.ParseStatusKB([]byte(read("proc/meminfo")), "MemTotal")
	info.Driver = parseNVIDIADriver(read("proc/driver/nvidia/version"))
	info.CUDA = parseCUDAVersion(read("usr/local/cuda/version.json"), read("usr/local/cuda/version.txt"))
	info.NCCL = findNCCL(root, libPath)
	info.Interfaces = interfaces(root)
}

// parseOSRelease returns PRETTY_NAME of an os-release file, unquoted.
func parseOSRelease(s string) string {
	for line := range strings.Lines(s) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// driverVersion finds the driver's version in /proc/driver/nvidia/version:
// the first word of the NVRM line that looks like one (535.104.05).
var driverVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\s(\d+\.\d+(?:\.\d+)*)\s`) })

// parseNVIDIADriver returns the driver's version from the text of
// /proc/driver/nvidia/version; "" without one.
func parseNVIDIADriver(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	if !strings.HasPrefix(first, "NVRM") {
		return ""
	}
	if m := driverVersion().FindStringSubmatch(first + " "); m != nil {
		return m[1]
	}
	return strings.TrimSpace(strings.TrimPrefix(first, "NVRM version:"))
}

// parseCUDAVersion returns the CUDA toolkit's version from version.json
// (CUDA 11.1 and later) or version.txt (earlier); "" from neither.
func parseCUDAVersion(versionJSON, versionTxt string) string {
	var v struct {
		CUDA struct {
			Version string `json:"version"`
		} `json:"cuda"`
	}
	if json.Unmarshal([]byte(versionJSON), &v) == nil && v.CUDA.Version != "" {
		return v.CUDA.Version
	}
	if s, ok := strings.CutPrefix(strings.TrimSpace(versionTxt), "CUDA Version "); ok {
		return s
	}
	return ""
}

// ncclDirs are where findNCCL looks for libnccl.so.2 after libPath, under
// the root: CUDA's, then the system's library directories.
var ncclDirs = []string{"usr/local/cuda/lib64", "usr/lib/*-linux-gnu", "usr/lib64", "usr/local/lib", "usr/lib"}

// findNCCL returns the version of the first libnccl.so.2 in the
// directories of libPath, then in ncclDirs, from the name of the file it
// links to (libnccl.so.2.18.3: 2.18.3), or of a libnccl.so.2.* file next
// to it.
func findNCCL(root string, libPath []string) string {
	var dirs []string
	for _, d := range libPath {
		if filepath.IsAbs(d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range ncclDirs {
		dirs = append(dirs, filepath.Join(root, d))
	}
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, "libnccl.so.2"))
		for _, lib := range m {
			if real, err := filepath.EvalSymlinks(lib); err == nil {
				if v, ok := strings.CutPrefix(filepath.Base(real), "libnccl.so.2."); ok {
					return "2." + v
				}
			}
			if more, _ := filepath.Glob(lib + ".*"); len(more) > 0 {
				return strings.TrimPrefix(filepath.Base(more[0]), "libnccl.so.")
			}
		}
	}
	return ""
}

// parseMPICHVersion reads mpichversion's first line, "MPICH Version:
// 4.0.2" (or "MVAPICH2 Version: 2.3.7" from MVAPICH's).
func parseMPICHVersion(out string) (key, version string) {
	first := firstLine(out)
	name, v, ok := strings.Cut(first, "Version:")
	if !ok {
		return "", ""
	}
	return strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(v)
}

var openMPIVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`Open MPI v(\S+)`) })

// parseOMPIInfo reads ompi_info --version's "Open MPI v4.1.4".
func parseOMPIInfo(out string) (key, version string) {
	if m := openMPIVersion().FindStringSubmatch(out); m != nil {
		return "openmpi", m[1]
	}
	return "", ""
}

// parsePython reads python3 --version's "Python 3.11.2".
func parsePython(out string) (key, version string) {
	v, ok := strings.CutPrefix(firstLine(out), "Python ")
	if !ok {
		return "", ""
	}
	return "python", v
}

// firstLine is the first non-empty line of s, trimmed.
func firstLine(s string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(first)
}
