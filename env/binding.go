package env

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gorun/gorun/topology"
)

// GPUBind says which GPUs a rank's GPU runtime sees (--gpu-bind).
type GPUBind string

// The GPU visibility modes.
const (
	// GPUBindAll, the default, leaves every GPU the job may use on the
	// node visible to every rank (all of them, the user's
	// CUDA_VISIBLE_DEVICES, or the allocation's), as torchrun and mpirun
	// do: local rank i finds its GPU as device i, which is what
	// torch.cuda.set_device(LOCAL_RANK) and cuda:LOCAL_RANK expect, and
	// NCCL sees every GPU of the node for its topology.
	GPUBindAll GPUBind = "all"
	// GPUBindSingle narrows each rank's visibility variable to its own
	// GPU, as Slurm's --gpus-per-task or --gpu-bind=single do: the rank
	// sees one GPU, as device 0, so a script that asks for device
	// LOCAL_RANK fails on every rank but local rank 0.
	GPUBindSingle GPUBind = "single"
)

// ParseGPUBind parses a --gpu-bind value: "" or "all", or "single"
// (case-insensitive).
func ParseGPUBind(s string) (GPUBind, error) {
	switch b := GPUBind(strings.ToLower(strings.TrimSpace(s))); b {
	case "", GPUBindAll:
		return GPUBindAll, nil
	case GPUBindSingle:
		return b, nil
	}
	return "", fmt.Errorf("gpu-bind %q: want all (every GPU visible to every rank) or single (each rank sees its own GPU only)", s)
}

// The variables through which a GPU runtime learns which GPUs it may use.
const (
	// CUDAVisibleDevices is CUDA's (and NVML-based tools').
	CUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	// CUDADeviceOrder makes CUDA number GPUs in PCI bus order
	// (PCI_BUS_ID) rather than fastest first, as gorun and nvidia-smi do.
	CUDADeviceOrder = "CUDA_DEVICE_ORDER"
	// ROCRVisibleDevices is ROCm's, below HIP: it filters what HIP, and
	// HIP_VISIBLE_DEVICES, then see. gorun sets this one only: setting
	// both to the same index would filter twice.
	ROCRVisibleDevices = "ROCR_VISIBLE_DEVICES"
	// ZEAffinityMask is Level Zero's (Intel GPUs).
	ZEAffinityMask = "ZE_AFFINITY_MASK"
	// ZEFlatDeviceHierarchy COMPOSITE makes Level Zero number whole
	// cards, as gorun does; FLAT (the driver's default) numbers each
	// stack (tile) of a card as a device.
	ZEFlatDeviceHierarchy = "ZE_FLAT_DEVICE_HIERARCHY"
	// UCXNetDevices is UCX's NIC choice, per rank.
	UCXNetDevices = "UCX_NET_DEVICES"
	// OMPNumThreads sizes OpenMP's (and torch's intra-op) thread pool.
	OMPNumThreads = "OMP_NUM_THREADS"
)

// VisibilityVar returns the variable that names the GPUs a runtime of
// vendor (topology.VendorNVIDIA, VendorAMD, VendorIntel) may use.
func VisibilityVar(vendor string) string {
	switch vendor {
	case topology.VendorAMD:
		return ROCRVisibleDevices
	case topology.VendorIntel:
		return ZEAffinityMask
	}
	return CUDAVisibleDevices
}

// BindingOptions are what Bindings needs besides the node's plan.
type BindingOptions struct {
	// GPUBind is --gpu-bind; "" is GPUBindAll.
	GPUBind GPUBind
	// Narrowed says that gorun itself chose the node's visible GPUs
	// (--include or --exclude named GPU slots): the ranks' visibility
	// variable then names them. Otherwise what the ranks see is inherited
	// (every GPU, the user's or the allocation's list) and left alone.
	Narrowed bool
	// User names the variables the user set (gorun's environment and
	// -x; [UserVars.Names]): Bindings never sets them, except the
	// visibility variable, which it narrows from the user's own list.
	User map[string]bool
	// Launcher is the launcher whose contract the ranks keep: where it
	// sets no threads ([Launcher.SetsThreads]), neither does Bindings.
	Launcher Launcher
	// NodeCPUs is the number of CPUs the node grants the job
	// ([UserVars.NodeCPUs]), 0 when unknown: unbound ranks get
	// OMP_NUM_THREADS of an even share of them.
	NodeCPUs int
}

// RankHints are what a rank's binding adds to its environment.
type RankHints struct {
	// Vars are NAME=value pairs. [Build] sets them over gorun's variables
	// and under the -x exports, except the GPU visibility variables
	// (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK),
	// which gorun computed from the user's own list and so go last.
	Vars []string
	// Note says, for --report-bindings, which GPUs the rank sees and
	// which of the user's variables were kept; "" when nothing to say.
	Note string
}

// Bindings returns the variables that each rank of a node's binding plan
// gets, and a line about the whole node for --report-bindings (empty when
// no rank is bound to a GPU):
//   - ranks bound to a GPU, with every GPU visible (GPUBindAll): nothing
//     that hides GPUs; the visible list when gorun narrowed it
//     (o.Narrowed); CUDA_DEVICE_ORDER=PCI_BUS_ID for NVIDIA GPUs, so that
//     CUDA's device i is gorun's GPU i; ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE
//     for Intel GPUs, so that Level Zero's device i is a card as gorun's
//     GPU i is;
//   - with GPUBindSingle, the rank's own GPU alone in its vendor's
//     visibility variable (its UUID when NVML gave one, else its index);
//   - no NCCL variable: NCCL finds each GPU's NIC from the topology, and
//     all ranks of a node must agree on NCCL_IB_HCA (NCCL issue 1478);
//   - with a NIC: UCX_NET_DEVICES=<ibdev>:1 or <netdev>, per rank, as UCX
//     wants it;
//   - ranks without a GPU, with GPUBindSingle: one entry of the granted
//     list gorun does not place (the plan's Unplaced: MIG instances, GPUs
//     this node's view lacks), local rank i the i-th, round robin;
//   - when bound to CPUs: OMP_NUM_THREADS, the rank's CPUs divided by the
//     number of ranks bound to the very same set (1 at least); unbound,
//     an even share of o.NodeCPUs when known; none where o.Launcher sets
//     no threads (mpirun, mpiexec).
//
// What the user set is kept, and the rank's Note says so.
func Bindings(plan []topology.RankBinding, o BindingOptions) (hints []RankHints, node string) {
	users := map[string]int{}
	for i := range plan {
		users[plan[i].CPUs.String()]++
	}
	hints = make([]RankHints, len(plan))
	for i := range plan {
		b := &plan[i]
		h := &hints[i]
		var kept []string
		set := func(name, value string) {
			if o.User[name] {
				kept = append(kept, name)
				return
			}
			h.Vars = append(h.Vars, name+"="+value)
		}
		var notes []string
		if g := b.GPU; g != nil {
			vis := VisibilityVar(g.Vendor)
			switch {
			case o.GPUBind == GPUBindSingle:
				h.Vars = append(h.Vars, vis+"="+gpuID(g))
				notes = append(notes, fmt.Sprintf("sees only its GPU, as device 0 (--gpu-bind single: %s=%s)", vis, gpuID(g)))
			case o.Narrowed:
				ids := make([]string, len(b.Visible))
				for k, v := range b.Visible {
					ids[k] = gpuID(v)
				}
				h.Vars = append(h.Vars, vis+"="+strings.Join(ids, ","))
				notes = append(notes, fmt.Sprintf("sees the %s of --include/--exclude, its GPU as device %d", plural(len(b.Visible), "GPU"), b.Device))
			default:
				notes = append(notes, fmt.Sprintf("sees the %s visible on the node, its GPU as device %d", plural(len(b.Visible), "GPU"), b.Device))
			}
			switch g.Vendor {
			case topology.VendorNVIDIA:
				set(CUDADeviceOrder, "PCI_BUS_ID")
			case topology.VendorIntel:
				set(ZEFlatDeviceHierarchy, "COMPOSITE")
			}
		}
		if c := b.NIC; c != nil {
			if c.IBDevice != "" {
				set(UCXNetDevices, c.IBDevice+":1")
			} else {
				set(UCXNetDevices, c.Name)
			}
		}
		if u := b.Unplaced; b.GPU == nil && o.GPUBind == GPUBindSingle && u != nil && len(u.IDs) > 0 {
			vis, id := VisibilityVar(u.Vendor), u.IDs[i%len(u.IDs)]
			h.Vars = append(h.Vars, vis+"="+id)
			notes = append(notes, "sees only "+id+" of the inherited "+vis+", as device 0 (--gpu-bind single)")
		}
		switch {
		case !o.Launcher.SetsThreads():
		case !b.CPUs.IsEmpty():
			set(OMPNumThreads, strconv.Itoa(max(1, b.CPUs.Len()/users[b.CPUs.String()])))
		case o.NodeCPUs > 0:
			set(OMPNumThreads, strconv.Itoa(max(1, o.NodeCPUs/len(plan))))
		}
		if len(kept) > 0 {
			notes = append(notes, "the user's "+strings.Join(kept, ", ")+" kept")
		}
		h.Note = strings.Join(notes, "; ")
	}
	return hints, nodeNote(plan, o)
}

// nodeNote is the node's line of --report-bindings: how ranks find their
// GPU, and why gorun sets no NCCL variable.
func nodeNote(plan []topology.RankBinding, o BindingOptions) string {
	for i := range plan {
		g := plan[i].GPU
		if g == nil {
			continue
		}
		var s string
		if o.GPUBind == GPUBindSingle {
			s = fmt.Sprintf("each rank sees only its own GPU (--gpu-bind single, in %s): scripts must use device 0, not LOCAL_RANK", VisibilityVar(g.Vendor))
		} else {
			torch := "cuda"
			if g.Vendor == topology.VendorIntel {
				torch = "xpu"
			}
			s = fmt.Sprintf("every rank sees the same %s and local rank i uses device i (torch.%s.set_device(LOCAL_RANK) works; --gpu-bind single isolates)",
				plural(len(plan[i].Visible), "GPU"), torch)
		}
		switch g.Vendor {
		case topology.VendorNVIDIA:
			s += "; CUDA numbers GPUs in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)"
			if o.User[CUDADeviceOrder] {
				s += ", unless the user's CUDA_DEVICE_ORDER says otherwise"
			}
			s += "; no NCCL variable set: NCCL picks each GPU's NIC from the topology"
		case topology.VendorIntel:
			s += "; Level Zero numbers whole cards (ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE)"
		}
		return s
	}
	return ""
}

// gpuID names g in its vendor's visibility variable: the UUID when NVML
// gave one, else the index (PCI bus order, which CUDA_DEVICE_ORDER makes
// CUDA's).
func gpuID(g *topology.GPU) string {
	if g.UUID != "" {
		return g.UUID
	}
	return strconv.Itoa(g.Index)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// slurmCPUsOnNode is the number of CPUs Slurm grants the job on the node.
const slurmCPUsOnNode = "SLURM_CPUS_ON_NODE"

// UserVars are the user's variables that shape a node's binding, read
// once from the ranks' environment ([ReadUserVars]): the launcher makes
// the plan's options (package topology) and those of [Bindings] from them.
type UserVars struct {
	// Names are the names of every variable set (OMP_NUM_THREADS,
	// CUDA_DEVICE_ORDER, UCX_NET_DEVICES, ...): [Bindings] sets none of
	// them ([BindingOptions.User]).
	Names map[string]bool
	// NodeCPUs is SLURM_CPUS_ON_NODE, the CPUs the node grants the job; 0
	// when unset or not a number.
	NodeCPUs int
	// GPUs are the lists of the GPU visibility variables that are set,
	// CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES and ZE_AFFINITY_MASK in
	// that order: what the user, Slurm or the allocation grants, for the
	// plan to place (topology.GPUGrant.Lists).
	GPUs []topology.GPUList
}

// ReadUserVars reads the user's variables that shape a node's binding
// from environ (the agent's environment, then the -x exports: the last
// value of a name wins, as for a process started with them). It is the
// one reader of the GPU visibility variables: each list's entries are
// trimmed and empty ones dropped.
func ReadUserVars(environ []string) UserVars {
	u := UserVars{Names: map[string]bool{}}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		u.Names[name] = true
	}
	if v, ok := Lookup(environ, slurmCPUsOnNode); ok {
		u.NodeCPUs, _ = strconv.Atoi(v)
	}
	for _, vendor := range []string{topology.VendorNVIDIA, topology.VendorAMD, topology.VendorIntel} {
		name := VisibilityVar(vendor)
		v, ok := Lookup(environ, name)
		if !ok {
			continue
		}
		l := topology.GPUList{Vendor: vendor, Var: name, Value: v}
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				l.IDs = append(l.IDs, id)
			}
		}
		u.GPUs = append(u.GPUs, l)
	}
	return u
}

// Lookup returns the value of name in environ (NAME=value pairs, the last
// one winning, as for a process started with them) and whether it is set.
func Lookup(environ []string, name string) (string, bool) {
	v, found := "", false
	for _, kv := range environ {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v, found = val, true
		}
	}
	return v, found
}
