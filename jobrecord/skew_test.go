package jobrecord

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// readHosts reads a testdata/skew fixture: the HostInfo of each host of
// a job, in plan order.
func readHosts(t *testing.T, name string) []HostInfo {
	t.Helper()
	path := filepath.Join("testdata", "skew", name+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var infos []HostInfo
	if err := json.Unmarshal(b, &infos); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return infos
}

// skewLines writes items compactly, one a line: "what: value=host,host
// | value=host".
func skewLines(items []SkewItem) []string {
	var lines []string
	for _, item := range items {
		var vals []string
		for _, v := range item.Values {
			vals = append(vals, v.Value+"="+strings.Join(v.Hosts, ","))
		}
		lines = append(lines, item.What+": "+strings.Join(vals, " | "))
	}
	return lines
}

// TestFindSkew compares the hosts of the fixtures under testdata/skew:
// what differs comes back with its values, the most common first, and
// the hosts in plan order; what differs by nature (virtual interfaces,
// per-process variables, CPUs, a kernel's build) does not; and FormatSkew
// prints it as testdata/skew/NAME.txt (go test -update rewrites those).
func TestFindSkew(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		want []string
	}{
		// Other builds of one kernel, other CPUs and memory, containers'
		// interfaces, an older gorun without interfaces, PATH,
		// OMPI_COMM_WORLD_RANK and CUDA_VISIBLE_DEVICES, and a lost host
		// that said nothing: no skew.
		{"none", nil},
		{"odd-kernel", []string{
			"kernel: 6.1.0-13-amd64=node1,node2,node3 | 6.1.0-9-amd64=node4",
			"mpich: =node1,node2,node3 | 4.0.2=node4",
		}},
		// node3 told no environment: it is in no env item.
		{"env-some", []string{
			"env NCCL_IB_HCA: =node2,node4 | mlx5_0=node1",
			"env NCCL_SOCKET_IFNAME: eth0=node1,node2 | ib0=node4",
			"env OMPI_MCA_btl_tcp_if_include: =node1,node2 | ib0=node4",
		}},
		// node3 has no eth0; node4's ib0 is down, so it has no speed to
		// compare.
		{"mtu", []string{
			"MTU of eth0: 1500=node1,node2,node4 | =node3",
			"speed of eth0: 25Gb/s=node2,node4 | 10Gb/s=node1",
			"MTU of ib0: 2044=node1,node3,node4 | 4092=node2",
			"state of ib0: up=node1,node2,node3 | down=node4",
		}},
		// 2 against 2: the value of the first host first, and no odd
		// hosts; 2 against 1 and 1: both ones are odd.
		{"tie", []string{
			"driver: 535.104.05=node1,node3 | 550.54.15=node2,node4",
			"Python: 3.11.2=node1,node2 | 3.12.1 (/home/me/venv/bin/python3)=node3 | 3.10.12=node4",
			"env NCCL_IB_HCA: mlx5_0=node1,node2 | =node3,node4",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			items := FindSkew(readHosts(t, tt.name))
			if got := skewLines(items); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FindSkew(%s) =\n\t%s\nwant\n\t%s", tt.name, strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
			var b strings.Builder
			FormatSkew(&b, items)
			golden := filepath.Join("testdata", "skew", tt.name+".txt")
			if *update {
				os.WriteFile(golden, []byte(b.String()), 0o644)
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("FormatSkew(%s) =\n%s\nwant (%s)\n%s", tt.name, b.String(), golden, want)
			}
		})
	}
}

// TestSkewOdd checks which hosts FormatSkew calls odd: those of a value
// that fewer hosts have than the most common one, none on a tie.
func TestSkewOdd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		hold []int // how many hosts hold each value, most common first
		odd  []bool
	}{
		{"one odd", []int{3, 1}, []bool{false, true}},
		{"tie", []int{2, 2}, []bool{false, false}},
		{"tie and one", []int{2, 2, 1}, []bool{false, false, true}},
		{"all different", []int{1, 1, 1}, []bool{false, false, false}},
	} {
		var item SkewItem
		for i, n := range tt.hold {
			item.Values = append(item.Values, SkewValue{Value: string(rune('a' + i)), Hosts: make([]string, n)})
		}
		for i, v := range item.Values {
			if got := item.Odd(v); got != tt.odd[i] {
				t.Errorf("%s: Odd(value %d of %v) = %v, want %v", tt.name, i, tt.hold, got, tt.odd[i])
			}
		}
	}
}

// TestFormatSkewLong names the first hosts of a long list, and quotes
// values that hold spaces or tabs.
func TestFormatSkewLong(t *testing.T) {
	t.Parallel()
	var infos []HostInfo
	for i := range 20 {
		h := HostInfo{Host: "n" + string(rune('a'+i)), GorunVersion: "1.0", Env: []string{"NCCL_ALGO=Ring"}}
		if i == 7 {
			h.Env = []string{"NCCL_ALGO=Tree\tRing"}
		}
		infos = append(infos, h)
	}
	var b strings.Builder
	FormatSkew(&b, FindSkew(infos))
	want := "skew: 1 thing differs between the 20 hosts\n" +
		"  env NCCL_ALGO  Ring (na nb nc nd ne nf ng ni and 11 more)   \"Tree\\tRing\" (odd: nh)\n"
	if b.String() != want {
		t.Errorf("FormatSkew =\n%s\nwant\n%s", b.String(), want)
	}
}

// TestInterfaces reads a host's interfaces from a /sys/class/net tree:
// all but the loopback and the virtual ones, by name, with their MTUs,
// speeds (none for a link that is down) and states.
func TestInterfaces(t *testing.T) {
	t.Parallel()
	got := interfaces("testdata")
	want := []Iface{
		{Name: "bond0", MTU: 9000, SpeedMbps: 50000, State: "up"},
		{Name: "eno1", MTU: 1500, SpeedMbps: 1000, State: "up"},
		{Name: "eno2", MTU: 1500, State: "down"},
		{Name: "ib0", MTU: 2044, SpeedMbps: 200000, State: "up"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("interfaces(testdata) =\n%+v\nwant\n%+v", got, want)
	}
	if got := interfaces(t.TempDir()); got != nil {
		t.Errorf("interfaces without sys/class/net = %+v, want nil", got)
	}
}

// TestGatherInterfaces checks that Gather records this machine's
// interfaces but the loopback and the virtual ones.
func TestGatherInterfaces(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Skip("no /sys/class/net")
	}
	var want []string
	for _, e := range entries {
		if !virtualIface(e.Name()) {
			want = append(want, e.Name())
		}
	}
	var info HostInfo
	files(&info, "/", nil)
	var got []string
	for _, i := range info.Interfaces {
		got = append(got, i.Name)
		if i.MTU < 68 {
			t.Errorf("interface %s: MTU %d, want at least 68", i.Name, i.MTU)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Gather's interfaces = %q, want %q", got, want)
	}
}

// TestRecordSkew compares the hosts of a record whose environments it
// keeps as differences from the head's: the same skew as of the
// environments themselves.
func TestRecordSkew(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"env-some", "tie", "none"} {
		infos := readHosts(t, name)
		want := FindSkew(infos)
		head := infos[0]
		r := &Record{Head: &head, Hosts: slices.Clone(infos)}
		r.DiffEnv()
		if r.Hosts[1].Env != nil || r.Hosts[1].EnvDiff == nil {
			t.Fatalf("%s: DiffEnv kept the environment: the test compares nothing", name)
		}
		if got := r.Skew(); !reflect.DeepEqual(skewLines(got), skewLines(want)) {
			t.Errorf("%s: Record.Skew =\n\t%s\nwant\n\t%s", name, strings.Join(skewLines(got), "\n\t"), strings.Join(skewLines(want), "\n\t"))
		}
		// Without the head's environment, there is nothing to compare
		// the hosts' with.
		r.Head = nil
		for _, line := range skewLines(r.Skew()) {
			if strings.HasPrefix(line, "env ") {
				t.Errorf("%s: Record.Skew without the head's environment: %s", name, line)
			}
		}
	}
}
