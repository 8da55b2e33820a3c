package topology

import (
	"io/fs"
	"os"
	"path"
	"strings"
)

// PCI vendor and class codes of GPUs.
const (
	vendorNVIDIA   = "0x10de"
	classVGA       = "0x0300"
	class3D        = "0x0302"
	pciDevicesPath = "sys/bus/pci/devices"
)

// CountGPUs returns the number of NVIDIA GPUs on the PCI bus of the
// machine whose root file system is sysroot (os.DirFS("/") for this one).
func CountGPUs(sysroot fs.FS) int {
	ents, err := fs.ReadDir(sysroot, pciDevicesPath)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		dir := path.Join(pciDevicesPath, e.Name())
		vendor, err1 := fs.ReadFile(sysroot, dir+"/vendor")
		class, err2 := fs.ReadFile(sysroot, dir+"/class")
		if err1 != nil || err2 != nil {
			continue
		}
		c := strings.TrimSpace(string(class))
		if strings.TrimSpace(string(vendor)) == vendorNVIDIA && (strings.HasPrefix(c, classVGA) || strings.HasPrefix(c, class3D)) {
			n++
		}
	}
	return n
}

// LocalGPUs counts the GPUs of this machine.
func LocalGPUs() int { return CountGPUs(os.DirFS("/")) }
