// Package nodecheck measures what lies inside one host, for gorun check
// --net: the bandwidth of copies between every two GPUs, over their path
// (NVLink or PCIe, against the link class gorun topo reports), and
// between the host and each GPU, through the CUDA plugin; and the state
// and rate of every RDMA NIC port. It flags what falls far below its
// class or its peers: a GPU in a slow slot, NVLinks down, a port not
// ACTIVE, or at a lower rate than the node's other ports of its model.
//
// The GPUs are measured as the device collectives use them: one plugin
// process per GPU (its option device=N), the destination's plugin
// mapping the source's buffer (CUDA IPC, peer access on) and copying
// from it; host copies go from memory the rank shares with the plugin
// (not pinned). Each measurement keeps its fastest of Options.Iters
// runs, taken in rounds over all the measurements, so that a moment of
// contention slows every one alike. The rules, in rules.go, are two: a
// floor per link class, set low (about half of what the slowest hardware
// in use gives), and, the one that needs no knowledge of the hardware, a
// measurement under 60% of the median of its peers (the node's other
// pairs of its class, the other GPUs' host copies).
package nodecheck

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/cuda/cu"
	"github.com/gorun/gorun/topology"
)

// Defaults of Options.
const (
	DefaultBytes  = 64 << 20
	DefaultIters  = 5
	DefaultBudget = 20 * time.Second
)

// Options says what to measure inside a node.
type Options struct {
	// Host names the host in the report (default os.Hostname).
	Host string
	// Root is the root of the sysfs tree to read ("" means "/").
	Root string
	// Node is the host's topology when the caller discovered it already;
	// nil means discover it from Root, with NVML.
	Node *topology.Node
	// NVML answers for the NVIDIA GPUs when Node is nil (package
	// nvmllib's New(), a topology.FakeNVML); nil means sysfs alone, which
	// knows no NVLinks: the GPU pairs then get their PCIe class.
	NVML topology.NVML
	// Plugin is the device plugin that copies on the GPUs: Name (default
	// "cuda"), Path, Dirs, PluginOptions, Log, StartTimeout. Its rank
	// fields are ignored, and its option "device" set for each GPU.
	Plugin plugins.Options
	// NoGPU skips the GPUs (the NICs only).
	NoGPU bool
	// Bytes is the size of each timed copy (default DefaultBytes).
	Bytes int
	// Iters is the number of timed copies of each measurement, of which
	// the fastest counts (default DefaultIters).
	Iters int
	// Budget bounds the GPU copies (default DefaultBudget); what is left
	// when it is spent is left out, and the note says so.
	Budget time.Duration
}

// Report is what one host found inside itself. It marshals to JSON.
type Report struct {
	// Host is the host's name.
	Host string `json:"host"`
	// GPUs is the number of GPUs measured, else of the GPUs sysfs shows.
	GPUs int `json:"gpus"`
	// Pairs are the copies from each GPU to each other one.
	Pairs []PairResult `json:"pairs,omitempty"`
	// HostCopies are the copies between the host and each GPU.
	HostCopies []HostCopy `json:"host_copies,omitempty"`
	// NICs are the ports of the RDMA devices.
	NICs []NICPort `json:"nics,omitempty"`
	// Flags are the findings, each a sentence naming the GPU or NIC.
	Flags []string `json:"flags,omitempty"`
	// Note is one line on what was not measured and why ("h1: no GPUs,
	// no RDMA NICs: nothing measured inside"), empty when everything was.
	Note string `json:"note,omitempty"`
}

// PairResult is the bandwidth of copies from one GPU's memory to
// another's.
type PairResult struct {
	// From and To name the GPUs as gorun topo does ("GPU 3"), or as the
	// plugin does ("cuda3") when sysfs does not show them.
	From string `json:"from"`
	To   string `json:"to"`
	// Link is the class of the path between them as gorun topo names it
	// ("NV18", "PIX", "SYS"), empty when unknown.
	Link string `json:"link,omitempty"`
	// GBps is the bandwidth measured, in GB/s (10^9 bytes a second).
	GBps float64 `json:"gbps"`
	// FloorGBps is the least a healthy link of the class gives, 0 when
	// the class is unknown.
	FloorGBps float64 `json:"floor_gbps,omitempty"`
	// Error says why the pair could not be measured.
	Error string `json:"error,omitempty"`
}

// HostCopy is the bandwidth of copies between the host and one GPU.
type HostCopy struct {
	// GPU names the GPU, as PairResult does.
	GPU string `json:"gpu"`
	// ToGPUGBps and FromGPUGBps are host to GPU and GPU to host, GB/s.
	ToGPUGBps   float64 `json:"to_gpu_gbps"`
	FromGPUGBps float64 `json:"from_gpu_gbps"`
	// Error says why the copies could not be measured.
	Error string `json:"error,omitempty"`
}

// NICPort is one port of an RDMA device.
type NICPort struct {
	// Name is the RDMA device ("mlx5_0"); Netdev its network interface,
	// if it has one.
	Name   string `json:"name"`
	Netdev string `json:"netdev,omitempty"`
	// Port is the port's number.
	Port int `json:"port"`
	// State is the port's state without its number ("ACTIVE", "DOWN",
	// "INIT"); PhysState the physical one ("LinkUp", "Polling").
	State     string `json:"state"`
	PhysState string `json:"phys_state,omitempty"`
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE), empty when unknown.
	LinkLayer string `json:"link_layer,omitempty"`
	// Rate is the rate as the kernel writes it ("100 Gb/sec (4X EDR)"),
	// RateGbps its number, 0 when unknown.
	Rate     string  `json:"rate,omitempty"`
	RateGbps float64 `json:"rate_gbps"`
	// Model is the device's PCI vendor and device ID ("0x15b3:0x1021"),
	// empty when unknown: only ports of one model are compared.
	Model string `json:"model,omitempty"`
}

// Measure measures the host. It does not fail: what it could not
// measure, and why, is in the report's note, and a GPU pair or GPU whose
// copies failed is flagged.
func Measure(ctx context.Context, o Options) Report {
	o = withDefaults(o)
	r := Report{Host: o.Host}
	var notes []string
	fsys := os.DirFS(o.Root)
	node := o.Node
	if node == nil {
		var err error
		if node, err = topology.Discover(fsys, o.NVML); err != nil {
			notes = append(notes, fmt.Sprintf("topology unknown (%v)", err))
			node = nil
		}
	}
	if gpuNote := measureGPUs(ctx, o, node, &r); gpuNote != "" {
		notes = append(notes, gpuNote)
	}
	measured := len(r.Pairs) > 0 || len(r.HostCopies) > 0
	ports, err := readPorts(fsys, node)
	switch {
	case err != nil:
		notes = append(notes, err.Error())
	case len(ports) == 0:
		notes = append(notes, "no RDMA NICs")
	default:
		measured = true
	}
	r.NICs = ports
	r.Flags = append(append(pairFlags(r.Pairs), hostFlags(r.HostCopies)...), nicFlags(r.NICs)...)
	switch {
	case !measured:
		r.Note = r.Host + ": " + strings.Join(notes, ", ") + ": nothing measured inside"
	case len(notes) > 0:
		r.Note = r.Host + ": " + strings.Join(notes, "; ")
	}
	return r
}

func withDefaults(o Options) Options {
	if o.Host == "" {
		o.Host, _ = os.Hostname()
		o.Host, _, _ = strings.Cut(o.Host, ".")
	}
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Plugin.Name == "" && o.Plugin.Path == "" {
		o.Plugin.Name = "cuda"
	}
	if o.Bytes <= 0 {
		o.Bytes = DefaultBytes
	}
	if o.Iters <= 0 {
		o.Iters = DefaultIters
	}
	if o.Budget <= 0 {
		o.Budget = DefaultBudget
	}
	return o
}

// measureGPUs measures the GPUs' copies into r, when node shows NVIDIA
// GPUs or a CUDA driver is named ($GORUN_CUDA_DRIVER), and returns what
// the note says of them ("" when everything was measured).
func measureGPUs(ctx context.Context, o Options, node *topology.Node, r *Report) string {
	nvidia, others := 0, 0
	if node != nil {
		for _, g := range node.GPUs {
			if g.Vendor == topology.VendorNVIDIA {
				nvidia++
			} else {
				others++
			}
		}
	}
	r.GPUs = nvidia + others
	// A driver named in the CUDA plugin's variable (the tests' fake, for
	// one) is measured even where sysfs shows no GPU.
	named := os.Getenv(cu.EnvDriver) != ""
	switch {
	case node == nil && !named:
		return "" // the topology's note says why nothing is known
	case o.NoGPU && r.GPUs > 0:
		return gpuCount(r.GPUs) + " not measured (asked not to)"
	case o.NoGPU:
		return "no GPUs"
	case nvidia == 0 && !named && others > 0:
		return gpuCount(others) + " not measured: the CUDA plugin measures NVIDIA GPUs only"
	case nvidia == 0 && !named:
		return "no GPUs"
	}
	run, err := openGPUs(ctx, o, node)
	defer run.close()
	if err != nil {
		return fmt.Sprintf("%s not measured: the %s plugin did not start (%s)", gpuCount(r.GPUs), pluginName(o.Plugin), oneLine(err))
	}
	r.GPUs = len(run.gpus)
	bctx, cancel := context.WithTimeout(ctx, o.Budget)
	defer cancel()
	r.HostCopies = run.hostCopies(bctx)
	r.Pairs = run.pairs(bctx)
	var notes []string
	if want := len(run.gpus) * (len(run.gpus) - 1); len(r.Pairs) < want || len(r.HostCopies) < len(run.gpus) {
		notes = append(notes, fmt.Sprintf("the GPUs' time (%v) ran out after %d of %d GPU pairs and %d of %d host copies",
			o.Budget, len(r.Pairs), want, len(r.HostCopies), len(run.gpus)))
	}
	if node != nil && node.GPUSource != "nvml" && nvidia > 0 {
		notes = append(notes, "GPU link classes from PCIe alone, without NVLinks (NVML: "+orUnknown(node.NVMLStatus)+")")
	}
	return strings.Join(notes, "; ")
}

func pluginName(p plugins.Options) string {
	if p.Name != "" {
		return p.Name
	}
	return p.Path
}

// oneLine keeps the first line of err's message.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// gpuCount says "1 GPU", "8 GPUs", or "the GPUs" for 0 (the ones a
// driver named by $GORUN_CUDA_DRIVER would show).
func gpuCount(n int) string {
	switch n {
	case 0:
		return "the GPUs"
	case 1:
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}
