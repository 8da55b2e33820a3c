package nodecheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gorun/gorun/topology"
)

// What a healthy link gives a copy, at least, in GB/s. The floors are
// set low, at about half of what the slowest hardware still in use
// reaches, so that a pair below its floor is certainly wrong; the
// comparison with the node's other pairs of the same class (peerRatio)
// is the finer test, and needs no knowledge of the hardware.
const (
	// nvlinkFloorPerLink is per NVLink of the pair: NVLink 1 to 4 carry
	// 20 to 25 GB/s a link each way (NVLink 5, 50), of which a copy gets
	// 80 to 90%: an H100 pair over NV18 copies at about 370 GB/s, an A100
	// pair over NV12 at about 250.
	nvlinkFloorPerLink = 10.0
	// pcieSwitchFloor is for PIX and PXB, peer to peer through PCIe
	// switches: a PCIe 3 x16 link gives 10 to 13 GB/s, PCIe 4 20 to 26,
	// PCIe 5 40 to 50.
	pcieSwitchFloor = 5.0
	// hostBridgeFloor is for PHB and NODE, through the CPU's root
	// complexes, which some CPUs route slowly or stage through memory.
	hostBridgeFloor = 3.0
	// sysFloor is for SYS, across sockets: usually staged through host
	// memory.
	sysFloor = 2.0
	// hostCopyFloor is for copies between the host and a GPU. They go
	// from memory the rank shares with the plugin, which is not pinned:
	// staged copies reach 6 to 10 GB/s on PCIe 3 x16 and 10 to 20 on
	// PCIe 4.
	hostCopyFloor = 3.0
	// peerRatio flags a measurement under this fraction of the median of
	// its peers (the node's other pairs of its class, the other GPUs'
	// host copies): a GPU in an x8 slot, or at PCIe 3 among PCIe 4 ones,
	// or with half its NVLinks down, copies at half the speed.
	peerRatio = 0.6
)

// floor returns the least bandwidth expected of a copy over link class c,
// GB/s.
func floor(c topology.LinkClass) float64 {
	switch c.Kind {
	case topology.LinkNVLink:
		return nvlinkFloorPerLink * float64(c.NVLinks)
	case topology.LinkPIX, topology.LinkPXB:
		return pcieSwitchFloor
	case topology.LinkPHB, topology.LinkNODE:
		return hostBridgeFloor
	case topology.LinkSYS:
		return sysFloor
	}
	return 0
}

// median returns the median of xs, 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// linkName is a pair's class as messages show it.
func linkName(link string) string {
	if link == "" {
		return "link unknown"
	}
	return link
}

// pairFlags returns a sentence for each pair that failed, fell below its
// class's floor, or fell under peerRatio of the median of the node's
// other pairs of its class.
func pairFlags(pairs []PairResult) []string {
	var out []string
	for i, p := range pairs {
		head := fmt.Sprintf("%s -> %s (%s)", p.From, p.To, linkName(p.Link))
		if p.Error != "" {
			out = append(out, fmt.Sprintf("%s: the copy failed: %s", head, p.Error))
			continue
		}
		var why []string
		if p.FloorGBps > 0 && p.GBps < p.FloorGBps {
			why = append(why, fmt.Sprintf("below the %.0f GB/s floor of %s links", p.FloorGBps, p.Link)+linkHint(p.Link))
		}
		var peers []float64
		for j, q := range pairs {
			if j != i && q.Link == p.Link && q.Error == "" && q.GBps > 0 {
				peers = append(peers, q.GBps)
			}
		}
		if m := median(peers); m > 0 && p.GBps < peerRatio*m {
			why = append(why, fmt.Sprintf("%.0f%% of the median of this node's other %s pairs (%.1f GB/s)", 100*p.GBps/m, linkName(p.Link), m))
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s: %.1f GB/s, %s", head, p.GBps, strings.Join(why, "; ")))
		}
	}
	return out
}

// linkHint suggests the cause of a link below its floor.
func linkHint(link string) string {
	if strings.HasPrefix(link, "NV") {
		return " (NVLinks down, or peer access off?)"
	}
	return " (a slow slot or link, or peer access off?)"
}

// hostFlags returns a sentence for each GPU whose host copies failed,
// fell below hostCopyFloor, or fell under peerRatio of the median of the
// other GPUs' copies the same way.
func hostFlags(copies []HostCopy) []string {
	var out []string
	for i, c := range copies {
		if c.Error != "" {
			out = append(out, fmt.Sprintf("%s: a copy between the host and the GPU failed: %s", c.GPU, c.Error))
			continue
		}
		var why []string
		for _, dir := range []struct {
			name string
			rate func(HostCopy) float64
		}{
			{"host to GPU", func(h HostCopy) float64 { return h.ToGPUGBps }},
			{"GPU to host", func(h HostCopy) float64 { return h.FromGPUGBps }},
		} {
			v := dir.rate(c)
			var peers []float64
			for j, d := range copies {
				if j != i && d.Error == "" && dir.rate(d) > 0 {
					peers = append(peers, dir.rate(d))
				}
			}
			switch m := median(peers); {
			case v < hostCopyFloor:
				why = append(why, fmt.Sprintf("%s %.1f GB/s, below the %.0f GB/s any PCIe 3 x16 slot gives", dir.name, v, hostCopyFloor))
			case m > 0 && v < peerRatio*m:
				why = append(why, fmt.Sprintf("%s %.1f GB/s, %.0f%% of the other GPUs' median (%.1f GB/s)", dir.name, v, 100*v/m, m))
			}
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s: %s: a slower PCIe slot or link (fewer lanes, an older generation)?", c.GPU, strings.Join(why, "; ")))
		}
	}
	return out
}

// nicFlags returns a sentence for each RDMA port that is not ACTIVE, or
// runs at a lower rate than another active port of the same model and
// link layer on the node (a NIC at half rate: a bad cable, a port
// trained to fewer lanes). Ports of different models may differ (a
// storage NIC beside the compute ones) and are not compared.
func nicFlags(ports []NICPort) []string {
	var out []string
	for i, p := range ports {
		if p.State != "ACTIVE" {
			phys := ""
			if p.PhysState != "" {
				phys = ", physical state " + p.PhysState
			}
			out = append(out, fmt.Sprintf("%s: %s%s, not ACTIVE", p.Label(), orUnknown(p.State), phys))
			continue
		}
		best, bestRate := 0.0, ""
		for j, q := range ports {
			if j != i && q.State == "ACTIVE" && q.Model == p.Model && q.LinkLayer == p.LinkLayer && q.RateGbps > best {
				best, bestRate = q.RateGbps, q.Rate
			}
		}
		if p.RateGbps > 0 && p.RateGbps < best {
			out = append(out, fmt.Sprintf("%s: %s, below the %s of another %s port of the same model on this node",
				p.Label(), p.Rate, bestRate, orUnknown(p.LinkLayer)))
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
