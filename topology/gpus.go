package topology

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// PCI vendor IDs of GPUs, and where sysfs lists PCI devices.
const (
	vendorNVIDIA   = "0x10de"
	vendorAMD      = "0x1002" // AMD's graphics vendor ID (ATI's); 0x1022 is its CPUs' and NPUs'
	vendorIntel    = "0x8086"
	pciDevicesPath = "sys/bus/pci/devices"
)

// gpuVendor classifies a PCI function by its vendor and class code
// ("0x10de", "0x030200") and returns its GPU vendor, or "" when it is not
// a GPU gorun runs ranks on:
//   - NVIDIA: a VGA (0x0300) or 3D (0x0302) controller;
//   - AMD: a display controller that is not VGA (0x0302 3D, 0x0380 other,
//     as the Instinct MI100-MI250 present) or a processing accelerator
//     (0x1200, as MI300 presents);
//   - Intel: a 3D or other display controller (0x0302, 0x0380: Data
//     Center GPU Max and Flex).
//
// VGA controllers of AMD and Intel are left out: they are integrated or
// desktop graphics (an APU, a laptop's iGPU), and a job that counted them
// would run one rank per display. Intel's processing accelerators (0x1200)
// are its NPUs, not GPUs.
func gpuVendor(vendor, class string) string {
	cls := pciClass(class)
	if len(cls) < 4 {
		return ""
	}
	cls = cls[:4]
	switch strings.ToLower(strings.TrimSpace(vendor)) {
	case vendorNVIDIA:
		if cls == "0300" || cls == "0302" {
			return VendorNVIDIA
		}
	case vendorAMD:
		if cls == "0302" || cls == "0380" || cls == "1200" {
			return VendorAMD
		}
	case vendorIntel:
		if cls == "0302" || cls == "0380" {
			return VendorIntel
		}
	}
	return ""
}

// gpuClass reports whether a PCI class (sysfs's "0x030200") is one that
// gpuVendor takes for some vendor: display (0x03) or processing
// accelerator (0x12).
func gpuClass(class string) bool {
	cls := pciClass(class)
	return strings.HasPrefix(cls, "03") || strings.HasPrefix(cls, "12")
}

// pciClass is a sysfs class attribute ("0x030200\n") as hex digits in
// lower case ("030200").
func pciClass(class string) string {
	return strings.TrimPrefix(strings.ToLower(strings.TrimSpace(class)), "0x")
}

// vendorRank orders vendors in Node.GPUs: NVIDIA, AMD, Intel.
func vendorRank(v string) int {
	switch v {
	case VendorNVIDIA:
		return 0
	case VendorAMD:
		return 1
	}
	return 2
}

// CountGPUs returns the number of GPUs (NVIDIA, AMD and Intel
// data-center GPUs, as gpuVendor classifies them) on the PCI bus of the
// machine whose root file system is sysroot (os.DirFS("/") for this one).
func CountGPUs(sysroot fs.FS) int {
	ents, err := fs.ReadDir(sysroot, pciDevicesPath)
	if err != nil {
		return 0
	}
	n := 0
	var cbuf, vbuf [32]byte
	for _, e := range ents {
		// The class first: most of a node's PCI functions (bridges, NICs,
		// switches: hundreds on a GPU node) are no display or processing
		// accelerator, and their vendor need not be read.
		dir := path.Join(pciDevicesPath, e.Name())
		class, err := readAttr(sysroot, dir+"/class", cbuf[:])
		if err != nil || !gpuClass(class) {
			continue
		}
		vendor, err := readAttr(sysroot, dir+"/vendor", vbuf[:])
		if err == nil && gpuVendor(vendor, class) != "" {
			n++
		}
	}
	return n
}

// readAttr reads a sysfs attribute of at most len(buf) bytes ("0x10de\n")
// with one read: open, read, close, where fs.ReadFile also stats the file
// and reads again for the end (gorun's head and each agent count GPUs as
// they start). A longer file is an error.
func readAttr(fsys fs.FS, name string, buf []byte) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err != nil && err != io.EOF {
		return "", err
	}
	if n == len(buf) {
		return "", fmt.Errorf("%s: longer than %d bytes", name, len(buf))
	}
	return string(buf[:n]), nil
}

// BindableGPUs returns the GPUs ranks are bound to by default, as
// indexes into n.GPUs in PCI bus order: every GPU of the node's first
// vendor (NVIDIA, else AMD, else Intel). A node that mixes vendors binds
// its ranks to one vendor's GPUs, since each runtime numbers only its own.
func BindableGPUs(n *Node) []int {
	out := []int{}
	for i := range n.GPUs {
		if n.GPUs[i].Vendor == n.GPUs[0].Vendor {
			out = append(out, i)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return n.GPUs[out[a]].BusID < n.GPUs[out[b]].BusID })
	return out
}

// LocalGPUs counts the GPUs of this machine.
func LocalGPUs() int { return CountGPUs(os.DirFS("/")) }
