package topology

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ncclSchema is testdata/nccl-topo.schema.json: what NCCL's topology
// loader accepts, as read from its source.
type ncclSchema struct {
	Limits struct {
		MaxStrLen int `json:"max_str_len"`
		MaxAttrs  int `json:"max_attrs"`
		MaxSubs   int `json:"max_subs"`
	} `json:"limits"`
	Formats  map[string]string `json:"formats"`
	Elements map[string]struct {
		Parents  []string          `json:"parents"`
		Required map[string]string `json:"required"`
		Optional map[string]string `json:"optional"`
		Single   []string          `json:"single"`
	} `json:"elements"`
	re map[string]*regexp.Regexp
}

func loadNCCLSchema(t *testing.T) *ncclSchema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "nccl-topo.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s ncclSchema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("nccl-topo.schema.json: %v", err)
	}
	s.re = map[string]*regexp.Regexp{}
	for k, v := range s.Formats {
		s.re[k] = regexp.MustCompile(v)
	}
	return &s
}

// elem is a parsed element of an NCCL topology.
type elem struct {
	name   string
	attrs  map[string]string
	order  []string
	subs   []*elem
	parent *elem
}

// path names e by its ancestors and their identifying attributes:
// "/system/cpu[numaid=0]/pci[busid=0000:16:00.0]".
func (e *elem) path() string {
	if e.parent == nil {
		return ""
	}
	s := e.parent.path() + "/" + e.name
	for _, k := range []string{"numaid", "busid", "dev", "name", "target"} {
		if v, ok := e.attrs[k]; ok {
			s += "[" + k + "=" + v + "]"
		}
	}
	return s
}

// ncclLine is one line as NCCL's parser reads it (xml.cc xmlGetNode):
// an open, single or close tag, attributes separated by one space, values
// in double quotes; no declaration, no text.
var ncclLine = regexp.MustCompile(`^ *(<[a-z]+( [a-z_]+="[^"]*")*/?>|</[a-z]+>)$`)

// parseNCCL parses an NCCL topology, checking first that NCCL's own
// parser could read each line.
func parseNCCL(data []byte) (*elem, error) {
	for i, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if !ncclLine.MatchString(l) {
			return nil, fmt.Errorf("line %d: NCCL's parser cannot read %q", i+1, l)
		}
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	root := &elem{name: ""}
	cur := root
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := &elem{name: tok.Name.Local, attrs: map[string]string{}, parent: cur}
			for _, a := range tok.Attr {
				if _, dup := e.attrs[a.Name.Local]; dup {
					return nil, fmt.Errorf("<%s>: attribute %s twice", e.name, a.Name.Local)
				}
				e.attrs[a.Name.Local] = a.Value
				e.order = append(e.order, a.Name.Local)
			}
			cur.subs = append(cur.subs, e)
			cur = e
		case xml.EndElement:
			cur = cur.parent
		case xml.CharData:
			if strings.TrimSpace(string(tok)) != "" {
				return nil, fmt.Errorf("text %q in <%s>", tok, cur.name)
			}
		default:
			return nil, fmt.Errorf("%T in <%s>: NCCL's parser reads elements only", tok, cur.name)
		}
	}
	if len(root.subs) != 1 {
		return nil, fmt.Errorf("%d root elements, want one <system>", len(root.subs))
	}
	return root, nil
}

// validate returns every way e and its children break the schema.
func (s *ncclSchema) validate(e *elem) []error {
	var errs []error
	for _, c := range e.subs {
		def, ok := s.Elements[c.name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: unknown element <%s>", e.path(), c.name))
			continue
		case !slices.Contains(def.Parents, e.name):
			errs = append(errs, fmt.Errorf("%s: <%s> not allowed here (parents %v)", e.path(), c.name, def.Parents))
		}
		if len(c.attrs) > s.Limits.MaxAttrs || len(c.subs) > s.Limits.MaxSubs {
			errs = append(errs, fmt.Errorf("%s: over NCCL's limits", c.path()))
		}
		for k := range def.Required {
			if _, ok := c.attrs[k]; !ok {
				errs = append(errs, fmt.Errorf("%s: no %s", c.path(), k))
			}
		}
		for k, v := range c.attrs {
			f, ok := def.Required[k]
			if !ok {
				f, ok = def.Optional[k]
			}
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s: attribute %s is not one NCCL reads", c.path(), k))
			case len(v) > s.Limits.MaxStrLen || !s.re[f].MatchString(v):
				errs = append(errs, fmt.Errorf("%s: %s=%q is not a %s (%s)", c.path(), k, v, f, s.Formats[f]))
			}
		}
		for _, one := range def.Single {
			if n := countSubs(c, one); n > 1 {
				errs = append(errs, fmt.Errorf("%s: %d <%s>, NCCL reads one", c.path(), n, one))
			}
		}
		errs = append(errs, s.validate(c)...)
	}
	return errs
}

func countSubs(e *elem, name string) int {
	n := 0
	for _, c := range e.subs {
		if c.name == name {
			n++
		}
	}
	return n
}

// find returns the elements named name under e, depth first.
func (e *elem) find(name string) []*elem {
	var out []*elem
	for _, c := range e.subs {
		if c.name == name {
			out = append(out, c)
		}
		out = append(out, c.find(name)...)
	}
	return out
}

func ncclTopo(t *testing.T, n *Node) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := n.WriteNCCLTopo(&buf); err != nil {
		t.Fatalf("WriteNCCLTopo: %v", err)
	}
	return buf.Bytes()
}

// The NCCL topology of every fixture machine passes the schema; those of
// the DGX and the PCIe machine match their golden files.
func TestNCCLTopoFixtures(t *testing.T) {
	t.Parallel()
	schema := loadNCCLSchema(t)
	tests := []struct {
		name   string
		golden bool
	}{
		{"dgx-h100", true}, {"pcie-4gpu", true}, {"mi300x", false}, {"intel-max", false}, {"cpu-2s", false}, {"this-vm", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := load(t, tt.name)
			out := ncclTopo(t, n)
			root, err := parseNCCL(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, err := range schema.validate(root) {
				t.Error(err)
			}
			checkNCCLAgainstModel(t, n, root)
			if !tt.golden {
				return
			}
			golden := filepath.Join("testdata", tt.name+".nccl-topo.xml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./topology -run NCCLTopo -update)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("WriteNCCLTopo(%s) differs from %s:\n%s", tt.name, golden, out)
			}
		})
	}
}

// checkNCCLAgainstModel holds the XML to the model: the NVIDIA GPUs (dev
// and bus ID), the NICs, the NVLink counts, and for every two devices
// not joined by NVLinks the path NCCL would see against the model's link
// class.
func checkNCCLAgainstModel(t *testing.T, n *Node, root *elem) {
	t.Helper()
	devs := map[string]*elem{} // "GPU0", "NIC3" -> its <pci>
	var gpus []int
	for i, g := range n.GPUs {
		if g.Vendor == VendorNVIDIA {
			gpus = append(gpus, i)
		}
	}
	xgpus := root.find("gpu")
	if len(xgpus) != len(gpus) {
		t.Fatalf("%d <gpu>, want %d NVIDIA GPUs", len(xgpus), len(gpus))
	}
	links := map[int]map[string]int{} // GPU index -> target -> count
	for _, x := range xgpus {
		dev, _ := strconv.Atoi(x.attrs["dev"])
		i := slices.IndexFunc(gpus, func(i int) bool { return n.GPUs[i].Index == dev })
		if i < 0 {
			t.Fatalf("<gpu dev=%d>: no such NVIDIA GPU", dev)
		}
		g := n.GPUs[gpus[i]]
		if bus := x.parent.attrs["busid"]; bus != g.BusID {
			t.Errorf("GPU %d under <pci busid=%q>, want %s", dev, bus, g.BusID)
		}
		devs[GPURef(gpus[i]).String()] = x.parent
		links[gpus[i]] = map[string]int{}
		for _, l := range x.find("nvlink") {
			c, _ := strconv.Atoi(l.attrs["count"])
			links[gpus[i]][l.attrs["target"]+" "+l.attrs["tclass"]] += c
		}
	}
	nets := root.find("net")
	if len(nets) != len(n.NICs) {
		t.Fatalf("%d <net>, want %d NICs", len(nets), len(n.NICs))
	}
	for i, nic := range n.NICs {
		name := nic.Name
		if nic.IBDevice != "" {
			name = nic.IBDevice
		}
		j := slices.IndexFunc(nets, func(e *elem) bool { return e.attrs["name"] == name })
		if j < 0 {
			t.Fatalf("no <net name=%q>", name)
		}
		pci := nets[j].parent.parent
		if pci.attrs["busid"] != nic.BusID {
			t.Errorf("NIC %s under <pci busid=%q>, want %s", name, pci.attrs["busid"], nic.BusID)
		}
		if want := strconv.Itoa(nic.SpeedMbps); nic.SpeedMbps > 0 && nets[j].attrs["speed"] != want {
			t.Errorf("NIC %s speed %q, want %s", name, nets[j].attrs["speed"], want)
		}
		devs[NICRef(i).String()] = pci
	}
	checkNVLinkCounts(t, n, gpus, links)
	m := Matrix(n)
	for i, a := range m.Devices {
		for j, b := range m.Devices {
			c := m.Links[i][j]
			if c.Kind == LinkSelf || c.Kind == LinkNVLink || devs[a.String()] == nil || devs[b.String()] == nil {
				continue
			}
			if got, want := ncclPath(devs[a.String()], devs[b.String()]), ncclKind(c.Kind); got != want {
				t.Errorf("%s-%s: NCCL sees %s in the XML, the model says %s", a, b, got, c)
			}
		}
	}
}

// checkNVLinkCounts: the model's NVLinks between two GPUs are the direct
// links plus, through NVSwitches, the smaller of the two GPUs' switch
// links; the XML must give the same.
func checkNVLinkCounts(t *testing.T, n *Node, gpus []int, links map[int]map[string]int) {
	t.Helper()
	switchLinks := func(i int) int {
		s := 0
		for k, c := range links[i] {
			if strings.HasSuffix(k, " "+ncclClassNVSwitch) {
				s += c
			}
		}
		return s
	}
	for _, i := range gpus {
		for _, j := range gpus {
			if i == j {
				continue
			}
			got := min(switchLinks(i), switchLinks(j))
			if d := n.PCI[n.GPUs[j].BusID]; d != nil {
				got += links[i][d.BusID+" "+d.Class]
			}
			if want := n.GPUs[i].NVLinks[j]; got != want {
				t.Errorf("GPU %d-%d: %d NVLinks in the XML, %d in the model", i, j, got, want)
			}
		}
	}
}

// ncclPath is the path class NCCL derives from the XML between two
// devices' <pci> elements: PIX for functions of one device or under one
// switch, PXB under several, PHB under one CPU, SYS across CPUs.
func ncclPath(a, b *elem) string {
	if ba, bb := a.attrs["busid"], b.attrs["busid"]; len(ba) == len(bb) && ba[:len(ba)-1] == bb[:len(bb)-1] {
		return "PIX" // functions of one device: one NIC to NCCL (topo.cc ncclTopoAddPci)
	}
	var up []*elem
	for e := a; e != nil; e = e.parent {
		up = append(up, e)
	}
	for e := b; e != nil; e = e.parent {
		if i := slices.Index(up, e); i >= 0 {
			switch {
			case e.name == "system":
				return "SYS"
			case e.name == "cpu":
				return "PHB"
			case e == a || e == b || (a.parent == e && b.parent == e):
				return "PIX"
			default:
				return "PXB"
			}
		}
	}
	return "SYS"
}

// ncclKind is the model's class as NCCL names paths: NODE is PHB to it.
func ncclKind(k LinkKind) string {
	if k == LinkNODE {
		return "PHB"
	}
	return LinkClass{Kind: k}.String()
}

// A hand-built node: link speeds and widths are the lower of the device's
// and its upstream port's, a device of no known NUMA node goes under
// <cpu numaid="-1">, a device sysfs does not know gets NCCL's fallback
// class, an NVLink's target class comes from sysfs when it knows the
// target.
func TestNCCLTopoCases(t *testing.T) {
	t.Parallel()
	n := &Node{
		NUMANodes: []NUMANode{{ID: 0, CPUs: NewCPUSet(0, 1, 2, 3, 32)}},
		PCI: map[string]*PCIDevice{
			"0000:00:01.0": {BusID: "0000:00:01.0", Class: "0x060400", Vendor: "0x8086", Device: "0x1234", MaxLinkSpeed: "16.0 GT/s PCIe", MaxLinkWidth: 16},
			"0000:01:00.0": {BusID: "0000:01:00.0", Class: "0x030200", Vendor: "0x10de", Device: "0x2330", SubsystemVendor: "0x10de", SubsystemDevice: "0x16c1",
				MaxLinkSpeed: "32.0 GT/s PCIe", MaxLinkWidth: 8, Parent: "0000:00:01.0", Path: []string{"0000:00:01.0"}},
			"0000:02:00.0": {BusID: "0000:02:00.0", Class: "0x030200", Vendor: "0x10de", Device: "0x2330"},
		},
		GPUs: []GPU{
			{Index: 0, Vendor: VendorNVIDIA, BusID: "0000:01:00.0", NUMA: 0,
				NVLinkTargets: []NVLinkInfo{{RemoteBusID: "0000:02:00.0", RemoteType: NVLinkRemoteGPU, Links: 4}, {RemoteBusID: "0000:03:00.0", RemoteType: NVLinkRemoteNPU, Links: 2}}},
			{Index: 1, Vendor: VendorNVIDIA, BusID: "0000:02:00.0", NUMA: -1},
			{Index: 0, Vendor: VendorAMD, BusID: "0000:04:00.0", NUMA: 0},
		},
		NICs: []NIC{{Name: "eth0", BusID: "0000:05:00.0", NUMA: 0, SpeedMbps: 25000}},
	}
	want := `<system version="1">
  <cpu numaid="-1">
    <pci busid="0000:02:00.0" class="0x030200" vendor="0x10de" device="0x2330">
      <gpu dev="1"/>
    </pci>
  </cpu>
  <cpu numaid="0" affinity="00000001,0000000f">
    <pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" subsystem_device="0x16c1" link_speed="16.0 GT/s PCIe" link_width="8">
      <gpu dev="0">
        <nvlink target="0000:02:00.0" count="4" tclass="0x030200"/>
        <nvlink target="0000:03:00.0" count="2" tclass="0x068001"/>
      </gpu>
    </pci>
    <pci busid="0000:05:00.0" class="0x02">
      <nic>
        <net name="eth0" speed="25000"/>
      </nic>
    </pci>
  </cpu>
</system>
`
	if got := string(ncclTopo(t, n)); got != want {
		t.Errorf("WriteNCCLTopo:\n%s\nwant:\n%s", got, want)
	}
	n.NICs[0].Name = `eth"0`
	if err := n.WriteNCCLTopo(io.Discard); err == nil || !strings.Contains(err.Error(), `eth\"0`) {
		t.Errorf("a value NCCL cannot read: err %v", err)
	}
}

func TestCPUMask(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cpus []int
		want string
	}{
		{nil, "00000000"},
		{[]int{0, 1, 2, 3}, "0000000f"},
		{[]int{31}, "80000000"},
		{[]int{0, 32}, "00000001,00000001"},
		{[]int{33}, "00000002,00000000"},
		{[]int{64, 127}, "80000000,00000001,00000000,00000000"},
	} {
		if got := cpuMask(NewCPUSet(tt.cpus...)); got != tt.want {
			t.Errorf("cpuMask(%v) = %s, want %s", tt.cpus, got, tt.want)
		}
	}
}
