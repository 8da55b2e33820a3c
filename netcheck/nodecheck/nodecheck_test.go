package nodecheck

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/cuda/cu"
	"github.com/gorun/gorun/topology"
)

// The RDMA fixture: its five PCI ports, with netdevs and models from the
// topology, the virtual rxe0 left out; a port at half rate and a port
// down flagged, the other model's slower port not.
func TestReadPorts(t *testing.T) {
	fsys := os.DirFS(filepath.Join("testdata", "rdma"))
	node, err := topology.ReadSysfs(fsys)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := readPorts(fsys, node)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ports {
		got = append(got, strings.Join([]string{p.Label(), p.State, p.PhysState, p.Rate, p.LinkLayer, p.Model}, "|"))
	}
	want := []string{
		"mlx5_0 port 1 (ib0)|ACTIVE|LinkUp|400 Gb/sec (4X NDR)|InfiniBand|0x15b3:0x1021",
		"mlx5_1 port 1 (ib1)|ACTIVE|LinkUp|200 Gb/sec (4X HDR)|InfiniBand|0x15b3:0x1021",
		"mlx5_2 port 1 (ib2)|DOWN|Disabled|10 Gb/sec (4X SDR)|InfiniBand|0x15b3:0x1021",
		"mlx5_3 port 1 (ib3)|ACTIVE|LinkUp|400 Gb/sec (4X NDR)|InfiniBand|0x15b3:0x1021",
		"mlx5_4 port 1 (eth0)|ACTIVE|LinkUp|100 Gb/sec (2X HDR)|Ethernet|0x15b3:0x101d",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ports:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Without a topology every device counts, and the model comes from
	// the device's own link.
	all, err := readPorts(fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 || all[5].Name != "rxe0" || all[0].Model != "0x15b3:0x1021" || all[0].Netdev != "" {
		t.Errorf("without a topology: %+v", all)
	}
	if none, err := readPorts(os.DirFS(filepath.Join("testdata", "no-rdma")), nil); err != nil || len(none) != 0 {
		t.Errorf("no RDMA: %v, %v", none, err)
	}
}

// Measure on machines without GPUs: the NICs alone, or one line saying
// that there is nothing to measure; the report as JSON and as text.
func TestMeasureWithoutGPUs(t *testing.T) {
	t.Setenv(cu.EnvDriver, "")
	for _, tt := range []struct {
		fixture string
		note    string
		flags   []string
		text    []string
	}{
		{"no-rdma", "h1: no GPUs, no RDMA NICs: nothing measured inside", nil,
			[]string{"h1: no GPUs, no RDMA NICs: nothing measured inside\n"}},
		{"rdma", "h1: no GPUs", []string{
			"mlx5_1 port 1 (ib1): 200 Gb/sec (4X HDR), below the 400 Gb/sec (4X NDR) of another InfiniBand port of the same model on this node",
			"mlx5_2 port 1 (ib2): DOWN, physical state Disabled, not ACTIVE",
		}, []string{"h1: no GPUs, 5 RDMA ports\n", "  RDMA ports:\n", "mlx5_4 port 1 (eth0)  ACTIVE  100 Gb/sec (2X HDR)  Ethernet",
			"  FLAG mlx5_2 port 1 (ib2): DOWN", "  note: h1: no GPUs\n"}},
	} {
		t.Run(tt.fixture, func(t *testing.T) {
			r := Measure(context.Background(), Options{Host: "h1", Root: filepath.Join("testdata", tt.fixture)})
			if r.Note != tt.note || strings.Join(r.Flags, "\n") != strings.Join(tt.flags, "\n") || r.GPUs != 0 || len(r.Pairs) != 0 {
				t.Errorf("note %q, flags:\n%s", r.Note, strings.Join(r.Flags, "\n"))
			}
			b, err := json.Marshal(r)
			var back Report
			if err != nil || json.Unmarshal(b, &back) != nil || back.Note != r.Note || len(back.NICs) != len(r.NICs) {
				t.Errorf("JSON: %s, %v", b, err)
			}
			var out bytes.Buffer
			Format(&out, []Report{r})
			for _, s := range tt.text {
				if !strings.Contains(out.String(), s) {
					t.Errorf("text lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

// GPUs in sysfs, but no plugin to measure them: the note says so (in
// one line), and the NIC-less host measured nothing; asked not to
// measure them, the note says that.
func TestMeasureNoPlugin(t *testing.T) {
	t.Setenv(cu.EnvDriver, "")
	root := filepath.Join("testdata", "gpus")
	r := Measure(context.Background(), Options{Host: "g1", Root: root,
		Plugin: plugins.Options{Path: filepath.Join(t.TempDir(), "gorun-plugin-cuda")}})
	if !strings.HasPrefix(r.Note, "g1: 3 GPUs not measured: the ") || !strings.Contains(r.Note, "plugin did not start") ||
		!strings.HasSuffix(r.Note, ", no RDMA NICs: nothing measured inside") || strings.Contains(r.Note, "\n") || r.GPUs != 3 {
		t.Errorf("note %q, %d GPUs", r.Note, r.GPUs)
	}
	r = Measure(context.Background(), Options{Host: "g1", Root: root, NoGPU: true})
	if r.Note != "g1: 3 GPUs not measured (asked not to), no RDMA NICs: nothing measured inside" {
		t.Errorf("note %q", r.Note)
	}
}

// This machine, as gorun check --net measures it: whatever it has, the
// report names the host and says something.
func TestMeasureHere(t *testing.T) {
	r := Measure(context.Background(), Options{NoGPU: true})
	host, _ := os.Hostname()
	if r.Host == "" || !strings.HasPrefix(host, r.Host) || (r.Note == "" && len(r.NICs) == 0) {
		t.Errorf("report %+v", r)
	}
}

// Hosts with nothing measured for the same reason share one line, before
// the hosts that have a report; another reason is a line of its own.
func TestFormatGroupsNothingMeasured(t *testing.T) {
	none := func(h string) Report {
		return Report{Host: h, Note: h + ": no GPUs, no RDMA NICs: nothing measured inside"}
	}
	rs := []Report{none("h1"), none("h2"),
		{Host: "h3", NICs: []NICPort{{Name: "mlx5_0", Port: 1, State: "ACTIVE", Rate: "100 Gb/sec (4X EDR)", RateGbps: 100}}},
		none("h4"), {Host: "h5", Note: "h5: the CUDA plugin did not start: no driver"}}
	var out bytes.Buffer
	Format(&out, rs)
	lines := strings.Split(out.String(), "\n")
	want := []string{"h1, h2, h4: no GPUs, no RDMA NICs: nothing measured inside", "h5: the CUDA plugin did not start: no driver", "", "h3: no GPUs, 1 RDMA ports"}
	if len(lines) < len(want) || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant it to start:\n%s", out.String(), strings.Join(want, "\n"))
	}
}
