package nodecheck

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/topology"
)

func TestFloor(t *testing.T) {
	for _, tt := range []struct {
		class topology.LinkClass
		want  float64
	}{
		{topology.LinkClass{Kind: topology.LinkNVLink, NVLinks: 18}, 180},
		{topology.LinkClass{Kind: topology.LinkNVLink, NVLinks: 2}, 20},
		{topology.LinkClass{Kind: topology.LinkPIX}, pcieSwitchFloor},
		{topology.LinkClass{Kind: topology.LinkPXB}, pcieSwitchFloor},
		{topology.LinkClass{Kind: topology.LinkPHB}, hostBridgeFloor},
		{topology.LinkClass{Kind: topology.LinkNODE}, hostBridgeFloor},
		{topology.LinkClass{Kind: topology.LinkSYS}, sysFloor},
		{topology.LinkClass{Kind: topology.LinkSelf}, 0},
	} {
		if got := floor(tt.class); got != tt.want {
			t.Errorf("floor(%s) = %v, want %v", tt.class, got, tt.want)
		}
	}
	// The classes are ordered: a closer link never expects less.
	if !(floor(topology.LinkClass{Kind: topology.LinkNVLink, NVLinks: 1}) >= pcieSwitchFloor && pcieSwitchFloor >= hostBridgeFloor && hostBridgeFloor >= sysFloor) {
		t.Error("floors out of order")
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tt.xs); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
}

// pairs builds the ordered pairs of GPUs 0..n-1, all of class link at
// rate, except those in slow (by "from-to") at their own rate.
func pairs(n int, link string, rate float64, slow map[string]float64) []PairResult {
	var out []PairResult
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			p := PairResult{From: gpuN(i), To: gpuN(j), Link: link, GBps: rate}
			if link != "" {
				p.FloorGBps = floor(classOf(link))
			}
			if r, ok := slow[gpuN(i)+"-"+gpuN(j)]; ok {
				p.GBps = r
			}
			out = append(out, p)
		}
	}
	return out
}

func gpuN(i int) string { return "GPU " + string(rune('0'+i)) }

func classOf(link string) topology.LinkClass {
	switch link {
	case "NV18":
		return topology.LinkClass{Kind: topology.LinkNVLink, NVLinks: 18}
	case "PIX":
		return topology.LinkClass{Kind: topology.LinkPIX}
	}
	return topology.LinkClass{Kind: topology.LinkSYS}
}

func TestPairFlags(t *testing.T) {
	for _, tt := range []struct {
		name  string
		pairs []PairResult
		want  []string // one substring per flag, in order
	}{
		{"healthy NVSwitch node", pairs(4, "NV18", 370, nil), nil},
		{"small spread is no finding", pairs(4, "NV18", 370, map[string]float64{"GPU 1-GPU 2": 300}), nil},
		{"one pair at half speed", pairs(4, "NV18", 370, map[string]float64{"GPU 1-GPU 2": 185}),
			[]string{"GPU 1 -> GPU 2 (NV18): 185.0 GB/s, 50% of the median of this node's other NV18 pairs (370.0 GB/s)"}},
		{"a link below its floor, both ways", pairs(2, "NV18", 100, nil), []string{
			"GPU 0 -> GPU 1 (NV18): 100.0 GB/s, below the 180 GB/s floor of NV18 links (NVLinks down",
			"GPU 1 -> GPU 0 (NV18)"}},
		{"below the floor and the median", pairs(3, "PIX", 20, map[string]float64{"GPU 2-GPU 0": 2}), []string{
			"GPU 2 -> GPU 0 (PIX): 2.0 GB/s, below the 5 GB/s floor of PIX links (a slow slot or link, or peer access off?); 10% of the median"}},
		{"unknown class: the median of unknown pairs only", pairs(3, "", 8, map[string]float64{"GPU 0-GPU 2": 1}), []string{
			"GPU 0 -> GPU 2 (link unknown): 1.0 GB/s, 12% of the median of this node's other link unknown pairs (8.0 GB/s)"}},
		{"classes are not compared with each other", append(pairs(2, "NV18", 370, nil), PairResult{From: "GPU 0", To: "GPU 3", Link: "SYS", GBps: 10, FloorGBps: sysFloor}), nil},
		{"a failed copy", []PairResult{{From: "GPU 0", To: "GPU 1", Link: "PIX", Error: "cuMemcpyDtoD: boom"}}, []string{
			"GPU 0 -> GPU 1 (PIX): the copy failed: cuMemcpyDtoD: boom"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkFlags(t, pairFlags(tt.pairs), tt.want)
		})
	}
}

func checkFlags(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d flags, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range got {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("flag %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

func TestHostFlags(t *testing.T) {
	healthy := func(n int) []HostCopy {
		var out []HostCopy
		for i := range n {
			out = append(out, HostCopy{GPU: gpuN(i), ToGPUGBps: 20, FromGPUGBps: 22})
		}
		return out
	}
	x8 := healthy(4)
	x8[3].ToGPUGBps, x8[3].FromGPUGBps = 10, 11
	oneWay := healthy(4)
	oneWay[1].FromGPUGBps = 6
	slow := healthy(1)
	slow[0].ToGPUGBps = 1.5
	failed := healthy(2)
	failed[0].Error = "cuMemcpyHtoD: boom"
	for _, tt := range []struct {
		name   string
		copies []HostCopy
		want   []string
	}{
		{"healthy", healthy(8), nil},
		{"one GPU alone, healthy", healthy(1), nil},
		{"a GPU in an x8 slot", x8, []string{"GPU 3: host to GPU 10.0 GB/s, 50% of the other GPUs' median (20.0 GB/s); GPU to host 11.0 GB/s, 50% of the other GPUs' median (22.0 GB/s): a slower PCIe slot"}},
		{"one way slow", oneWay, []string{"GPU 1: GPU to host 6.0 GB/s, 27%"}},
		{"below the floor, no peers", slow, []string{"GPU 0: host to GPU 1.5 GB/s, below the 3 GB/s"}},
		{"a failed copy", failed, []string{"GPU 0: a copy between the host and the GPU failed: cuMemcpyHtoD: boom"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkFlags(t, hostFlags(tt.copies), tt.want)
		})
	}
}

func TestNICFlags(t *testing.T) {
	port := func(name, state, rate, model, layer string) NICPort {
		return NICPort{Name: name, Port: 1, State: state, Rate: rate, RateGbps: parseRate(rate), Model: model, LinkLayer: layer}
	}
	const cx7, cx6 = "0x15b3:0x1021", "0x15b3:0x101d"
	ndr := "400 Gb/sec (4X NDR)"
	for _, tt := range []struct {
		name  string
		ports []NICPort
		want  []string
	}{
		{"healthy", []NICPort{port("mlx5_0", "ACTIVE", ndr, cx7, "InfiniBand"), port("mlx5_1", "ACTIVE", ndr, cx7, "InfiniBand")}, nil},
		{"alone", []NICPort{port("mlx5_0", "ACTIVE", "100 Gb/sec (4X EDR)", cx7, "InfiniBand")}, nil},
		{"half rate", []NICPort{port("mlx5_0", "ACTIVE", ndr, cx7, "InfiniBand"), port("mlx5_1", "ACTIVE", "200 Gb/sec (4X HDR)", cx7, "InfiniBand")},
			[]string{"mlx5_1 port 1: 200 Gb/sec (4X HDR), below the 400 Gb/sec (4X NDR) of another InfiniBand port of the same model"}},
		{"down", []NICPort{{Name: "mlx5_0", Port: 1, State: "DOWN", PhysState: "Polling", Netdev: "ib0"}, port("mlx5_1", "ACTIVE", ndr, cx7, "InfiniBand")},
			[]string{"mlx5_0 port 1 (ib0): DOWN, physical state Polling, not ACTIVE"}},
		{"a down port's rate is not compared", []NICPort{port("mlx5_0", "DOWN", "10 Gb/sec (4X SDR)", cx7, "InfiniBand"), port("mlx5_1", "ACTIVE", "200 Gb/sec (4X HDR)", cx7, "InfiniBand")},
			[]string{"mlx5_0 port 1: DOWN, not ACTIVE"}},
		{"INIT: no subnet manager", []NICPort{port("mlx5_0", "INIT", ndr, cx7, "InfiniBand")}, []string{"mlx5_0 port 1: INIT, not ACTIVE"}},
		{"other models and link layers differ", []NICPort{
			port("mlx5_0", "ACTIVE", ndr, cx7, "InfiniBand"), port("mlx5_1", "ACTIVE", "100 Gb/sec (2X HDR)", cx6, "Ethernet"),
			port("mlx5_2", "ACTIVE", "200 Gb/sec (2X NDR)", cx7, "Ethernet")}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkFlags(t, nicFlags(tt.ports), tt.want)
		})
	}
}

func TestParseRate(t *testing.T) {
	for s, want := range map[string]float64{
		"100 Gb/sec (4X EDR)": 100, "2.5 Gb/sec (1X SDR)": 2.5, "": 0, "fast": 0, "10 Mb/sec": 0,
	} {
		if got := parseRate(s); got != want {
			t.Errorf("parseRate(%q) = %v, want %v", s, got, want)
		}
	}
}
