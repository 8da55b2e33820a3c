package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Record writes the machine whose root file system is at root ("/" for
// this one) into dir as a fixture that Discover reads back: the sysfs
// files discovery reads under dir/sys (CPU and NUMA topology, PCI
// devices at their real paths, with the symbolic links of
// sys/bus/pci/devices, sys/class/net and sys/class/infiniband kept as
// links; virtual network interfaces left out), and, when lib's Init
// succeeds, what NVML says under dir/nvml.json, in LoadFakeNVML's format.
// A nil lib, or an NVML that fails to start, records no nvml.json. It
// returns the number of files written.
func Record(root, dir string, lib NVML) (int, error) {
	r := recorder{root: root, dir: dir}
	r.copy(cpuDir + "/online")
	cpus, _ := filepath.Glob(filepath.Join(root, cpuDir, "cpu[0-9]*"))
	for _, c := range cpus {
		for _, f := range []string{"core_id", "physical_package_id", "thread_siblings_list"} {
			r.copy(r.rel(c) + "/topology/" + f)
		}
	}
	nodes, _ := filepath.Glob(filepath.Join(root, nodeDir, "node[0-9]*"))
	for _, n := range nodes {
		r.copy(r.rel(n) + "/cpulist")
		r.copy(r.rel(n) + "/meminfo")
	}
	devs, _ := filepath.Glob(filepath.Join(root, pciDevicesPath, "*"))
	for _, d := range devs {
		real := r.real(d)
		for _, f := range []string{"class", "vendor", "device", "numa_node", "local_cpulist",
			"subsystem_vendor", "subsystem_device", "max_link_speed", "max_link_width"} {
			r.copy(real + "/" + f)
		}
		r.link(d)
	}
	for _, class := range []string{netDir, ibDir} {
		ents, _ := filepath.Glob(filepath.Join(root, class, "*"))
		for _, d := range ents {
			real := r.real(d)
			if strings.HasPrefix(real, devicesDir+"/virtual/") {
				continue
			}
			r.copy(real + "/speed")
			r.copy(real + "/operstate")
			ports, _ := filepath.Glob(filepath.Join(root, real, "ports", "*"))
			for _, p := range ports {
				r.copy(r.rel(p) + "/state")
				r.copy(r.rel(p) + "/rate")
			}
			r.link(d)
		}
	}
	if r.err != nil {
		return r.files, fmt.Errorf("record %s into %s: %w", root, dir, r.err)
	}
	if r.files == 0 {
		return 0, fmt.Errorf("record %s into %s: no sysfs file found under %s", root, dir, filepath.Join(root, "sys"))
	}
	if lib == nil || lib.Init() != nil {
		return r.files, nil
	}
	fake, err := recordNVML(lib)
	if serr := lib.Shutdown(); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return r.files, fmt.Errorf("record NVML into %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(fake, "", " ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "nvml.json"), append(b, '\n'), 0o644)
	}
	if err != nil {
		return r.files, fmt.Errorf("record NVML into %s: %w", dir, err)
	}
	return r.files + 1, nil
}

// recordNVML asks an initialized lib everything FakeNVML serves: the
// devices, and the peer-to-peer status of every pair (the most common one
// as P2P, the others in P2PPairs).
func recordNVML(lib NVML) (*FakeNVML, error) {
	count, err := lib.DeviceCount()
	if err != nil {
		return nil, err
	}
	f := &FakeNVML{GPUs: make([]GPUInfo, count), P2PPairs: map[string]string{}}
	for i := range f.GPUs {
		if f.GPUs[i], err = lib.Device(i); err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	pairs := map[string]string{}
	seen := map[string]int{}
	for i := range count {
		for j := range count {
			if i == j {
				continue
			}
			st, err := lib.P2PStatus(i, j)
			if err != nil {
				return nil, fmt.Errorf("P2P status of GPUs %d and %d: %w", i, j, err)
			}
			pairs[fmt.Sprintf("%d,%d", i, j)] = st
			seen[st]++
		}
	}
	var kinds []string
	for st := range seen {
		kinds = append(kinds, st)
	}
	sort.Slice(kinds, func(a, b int) bool {
		return seen[kinds[a]] > seen[kinds[b]] || seen[kinds[a]] == seen[kinds[b]] && kinds[a] < kinds[b]
	})
	if len(kinds) > 0 {
		f.P2P = kinds[0]
	}
	for k, st := range pairs {
		if st != f.P2P {
			f.P2PPairs[k] = st
		}
	}
	if len(f.P2PPairs) == 0 {
		f.P2PPairs = nil
	}
	return f, nil
}

// recorder copies files and links from root into dir, keeping the first
// error.
type recorder struct {
	root, dir string
	files     int
	err       error
}

// rel turns a path under root into one relative to it.
func (r *recorder) rel(p string) string {
	rel, err := filepath.Rel(r.root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(rel)
}

// real is the real path of p (under root), relative to root.
func (r *recorder) real(p string) string {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return r.rel(p)
	}
	root, err := filepath.EvalSymlinks(r.root)
	if err != nil {
		root = r.root
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return r.rel(p)
	}
	return filepath.ToSlash(rel)
}

// copy copies the file rel if it can be read (sysfs has files only root
// may read, and attributes that fail to read on some devices).
func (r *recorder) copy(rel string) {
	if r.err != nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(r.root, rel))
	if err != nil {
		return
	}
	dst := filepath.Join(r.dir, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		r.err = err
		return
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		r.err = err
		return
	}
	r.files++
}

// link recreates the symbolic link p (a path under root) in dir, with the
// same target.
func (r *recorder) link(p string) {
	if r.err != nil {
		return
	}
	target, err := os.Readlink(p)
	if err != nil {
		return
	}
	dst := filepath.Join(r.dir, r.rel(p))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		r.err = err
		return
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.err = err
		return
	}
	if err := os.Symlink(target, dst); err != nil {
		r.err = err
	}
}
