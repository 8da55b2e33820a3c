package topology

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// TestAgainstHwloc checks the sysfs discovery of this machine against
// hwloc's: the same numbers of packages, NUMA nodes, cores and PUs.
// Without lstopo (Debian package hwloc) it skips, or fails when CI is set.
func TestAgainstHwloc(t *testing.T) {
	t.Parallel()
	lstopo := testenv.NeedTool(t, "lstopo", "hwloc")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --whole-system: count CPUs a cgroup keeps from this process too, as
	// sysfs does.
	out, err := exec.CommandContext(ctx, lstopo, "--whole-system", "--of", "xml", "-").Output()
	if err != nil {
		t.Fatalf("lstopo: %v", err)
	}
	counts, err := hwlocCounts(out)
	if err != nil {
		t.Fatal(err)
	}
	n, err := ReadSysfs(os.DirFS("/"))
	if err != nil {
		t.Fatal(err)
	}
	cores := 0
	for _, p := range n.Packages {
		cores += p.Cores
	}
	got := map[string]int{"Package": len(n.Packages), "NUMANode": len(n.NUMANodes), "Core": cores, "PU": len(n.CPUs)}
	for k, v := range got {
		if counts[k] != v {
			t.Errorf("%s: sysfs discovery finds %d, hwloc %d", k, v, counts[k])
		}
	}
}

// hwlocCounts counts the objects of each type in lstopo's XML.
func hwlocCounts(b []byte) (map[string]int, error) {
	counts := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return counts, nil
		}
		if err != nil {
			return nil, err
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "object" {
			for _, a := range se.Attr {
				if a.Name.Local == "type" {
					counts[a.Value]++
				}
			}
		}
	}
}

func TestHwlocCounts(t *testing.T) {
	t.Parallel()
	x := `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE topology SYSTEM "hwloc2.dtd"><topology version="2.0">
<object type="Machine" os_index="0"><object type="Package"><object type="NUMANode"/><object type="Core"><object type="PU"/><object type="PU"/></object></object></object></topology>`
	c, err := hwlocCounts([]byte(x))
	if err != nil || c["Package"] != 1 || c["NUMANode"] != 1 || c["Core"] != 1 || c["PU"] != 2 {
		t.Fatalf("hwlocCounts = %v, %v", c, err)
	}
}

// TestPXB builds a node by hand: two devices behind two levels of PCIe
// switches meet at the upper switch (PXB), two behind the same lower
// switch are PIX.
func TestPXB(t *testing.T) {
	t.Parallel()
	dev := func(id string, path ...string) *PCIDevice {
		return &PCIDevice{BusID: id, HostBridge: "pci0000:00", Path: path, NUMA: 0}
	}
	// root port 00:01.0 -> switch A (01:00.0 up, 02:0x.0 down) -> switch
	// B (03:00.0 up, 04:0x.0 down) -> GPUs 05 and 06; switch C under A's
	// other downstream port -> NIC 09.
	n := &Node{
		NUMANodes: []NUMANode{{ID: 0, CPUs: NewCPUSet(0)}},
		GPUs:      []GPU{{Index: 0, BusID: "0000:05:00.0"}, {Index: 1, BusID: "0000:06:00.0"}},
		NICs:      []NIC{{Name: "eth0", BusID: "0000:09:00.0"}},
		PCI: map[string]*PCIDevice{
			"0000:05:00.0": dev("0000:05:00.0", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"),
			"0000:06:00.0": dev("0000:06:00.0", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:01.0"),
			"0000:09:00.0": dev("0000:09:00.0", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:07:00.0", "0000:08:00.0"),
		},
	}
	if got := n.Link(GPURef(0), GPURef(1)).String(); got != "PIX" {
		t.Errorf("GPU0-GPU1 = %s, want PIX", got)
	}
	if got := n.Link(GPURef(0), NICRef(0)).String(); got != "PXB" {
		t.Errorf("GPU0-NIC0 = %s, want PXB", got)
	}
}
