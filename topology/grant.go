package topology

// The usable GPUs: what a job may use of a node's GPUs, as the ranks'
// environment and the host list grant them, and how a plan finds them on
// the node. Package env reads the variables; this file only places what
// they list.

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// GPUList is the list of one GPU visibility variable as the ranks'
// environment sets it (package env reads it; topology reads no
// variable): the GPUs of one vendor that the ranks' runtime may use, in
// the order it numbers them.
type GPUList struct {
	// Vendor is the vendor whose runtime reads the list: VendorNVIDIA,
	// VendorAMD or VendorIntel.
	Vendor string
	// Var names the list in errors and reasons (its variable's name).
	Var string
	// Value is the list as it was set, for errors and reasons.
	Value string
	// IDs are its entries, trimmed, without empty ones: each an index
	// among the vendor's GPUs in PCI bus order, a UUID or a prefix of one
	// ("GPU-6b1f"), or a MIG instance ("MIG-..."), which gorun does not
	// place. No entry grants no GPU.
	IDs []string
}

// GPUGrant says which of a node's GPUs a job may use: the usable GPUs.
// The zero value grants every GPU.
type GPUGrant struct {
	// Lists are the visibility lists the ranks' environment sets, at most
	// one per vendor (where a vendor has more, the last counts). The list
	// of the vendor whose GPUs ranks are bound to (that of BindableGPUs;
	// NVIDIA's on a node without GPUs) grants its GPUs, in its order;
	// without it, every GPU of that vendor is granted, in PCI bus order.
	Lists []GPUList
	// Slots are the GPU slots the host list leaves (DeepSpeed's
	// --include/--exclude): indexes among the bound vendor's GPUs in PCI
	// bus order, kept within what the list grants, in index order. nil
	// means every slot.
	Slots []int
}

// list returns the grant's list for vendor, nil when none is set.
func (g GPUGrant) list(vendor string) *GPUList {
	var l *GPUList
	for i := range g.Lists {
		if g.Lists[i].Vendor == vendor {
			l = &g.Lists[i]
		}
	}
	return l
}

// namesUUIDs reports whether the grant names NVIDIA GPUs by UUID, which
// only NVML knows.
func (g GPUGrant) namesUUIDs() bool {
	if l := g.list(VendorNVIDIA); l != nil {
		for _, id := range l.IDs {
			if strings.HasPrefix(id, "GPU-") {
				return true
			}
		}
	}
	return false
}

// boundVendor is the vendor whose GPUs ranks are bound to on n (see
// BindableGPUs): NVIDIA on a node without GPUs.
func boundVendor(n *Node) string {
	if len(n.GPUs) == 0 {
		return VendorNVIDIA
	}
	return n.GPUs[0].Vendor
}

// errMIG is wrapped by the error of a list that names MIG instances
// (MIG-<uuid>), which gorun does not map to their GPUs.
var errMIG = errors.New("MIG instances")

// granted returns the GPUs g grants on n, as indexes into n.GPUs in the
// order the ranks' runtime numbers them; nil means every bindable GPU. A
// list that names MIG instances gives an error that wraps errMIG.
func (g GPUGrant) granted(n *Node) ([]int, error) {
	if len(n.GPUs) == 0 {
		return nil, nil
	}
	var vis []int
	if l := g.list(boundVendor(n)); l != nil {
		var err error
		if vis, err = findGPUs(n, l.Var, l.Value, l.IDs); err != nil {
			return nil, err
		}
	}
	if g.Slots == nil {
		return vis, nil
	}
	ids := make([]string, len(g.Slots))
	for i, s := range g.Slots {
		ids[i] = strconv.Itoa(s)
	}
	inc, err := findGPUs(n, "--include/--exclude", strings.Join(ids, ","), ids)
	if err != nil {
		return nil, err
	}
	slices.Sort(inc)
	if vis != nil {
		inc = slices.DeleteFunc(inc, func(i int) bool { return !slices.Contains(vis, i) })
	}
	return inc, nil
}

// findGPUs finds the GPUs that ids name (indexes among the bindable GPUs
// in PCI bus order, UUIDs and their prefixes) on n, as indexes into
// n.GPUs in the order given; what=value names the list in errors.
func findGPUs(n *Node, what, value string, ids []string) ([]int, error) {
	bindable := BindableGPUs(n)
	out := []int{}
	for _, id := range ids {
		if strings.HasPrefix(id, "MIG-") {
			return nil, fmt.Errorf("%s=%s names %w", what, value, errMIG)
		}
		found := -1
		for k, i := range bindable {
			g := &n.GPUs[i]
			if id == strconv.Itoa(k) || g.UUID != "" && (id == g.UUID || strings.HasPrefix(id, "GPU-") && strings.HasPrefix(g.UUID, id)) {
				found = i
				break
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("%s=%s: no GPU %q on this host (%d GPUs)", what, value, id, len(bindable))
		}
		if slices.Contains(out, found) {
			return nil, fmt.Errorf("%s=%s: %s listed twice", what, value, n.GPUs[found].Name())
		}
		out = append(out, found)
	}
	return out, nil
}

// usableGPUs returns the GPUs o's ranks may use on n (o.Grant), as
// indexes into n.GPUs in the order their runtime numbers them. Where the
// grant names MIG instances, which gorun does not place, no GPU is usable
// and mig says why; with --bind-to gpu, or GPU slots to narrow, that is
// an error.
func (o BindOptions) usableGPUs(n *Node, mode BindTo) (usable []int, mig, err error) {
	usable, err = o.Grant.granted(n)
	switch {
	case errors.Is(err, errMIG) && mode == BindGPU:
		return nil, nil, fmt.Errorf("--bind-to gpu: %w, which gorun does not place on GPUs; without --bind-to gpu the ranks run unbound with them", err)
	case errors.Is(err, errMIG) && o.Grant.Slots == nil:
		return []int{}, err, nil
	case err != nil:
		return nil, nil, err
	case usable == nil:
		return BindableGPUs(n), nil, nil
	}
	return usable, nil, nil
}

// placeGrant finishes plan out on n with what the plan did not place of
// o's grant: where the grant names MIG instances (mig), each rank's Why
// says so and every rank gets the list (Unplaced); on a node without GPUs
// every rank gets the grant's NVIDIA list (the GPUs a resource manager
// granted that this node's view lacks). Elsewhere, o.OwnGPU wants the
// ranks bound to GPUs.
func (o BindOptions) placeGrant(n *Node, out []RankBinding, mig error) error {
	var unplaced *GPUList
	switch {
	case mig != nil:
		unplaced = o.Grant.list(boundVendor(n))
		for i := range out {
			out[i].Why = strings.Replace(out[i].Why, "no GPUs visible", "no GPU of its own", 1) + "; " + mig.Error() + ", which gorun does not place"
		}
	case len(n.GPUs) == 0:
		unplaced = o.Grant.list(VendorNVIDIA)
	case o.OwnGPU && out[0].GPU == nil:
		return errOwnGPU(out[0].Why)
	}
	for i := range out {
		out[i].Unplaced = unplaced
	}
	return nil
}

// errOwnGPU is the error of o.OwnGPU for ranks bound to no GPU, why.
func errOwnGPU(why string) error {
	return fmt.Errorf("--gpu-bind single: the ranks are not bound to GPUs (%s); use --bind-to gpu", why)
}

// PlanWithoutNode plans o's ranks without discovering the node, where o
// binds nothing whatever the node's CPUs and GPUs are: BindNone; or
// BindDefault on an oversubscribed node, or on a node without GPUs under
// a rule that binds nothing then (DefaultRule.BindsWithoutGPUs). It
// counts the GPUs of the machine whose root file system is sysroot
// (CountGPUs), reads nothing else, and returns ok false, and no plan,
// where the plan needs the node (PlanBindings). Without GPUs every rank
// gets the grant's NVIDIA list (Unplaced); with them, o.OwnGPU is an
// error. The ranks' Why is empty: a report of the bindings describes the
// node, which PlanBindings plans.
func PlanWithoutNode(sysroot fs.FS, o BindOptions) (plan []RankBinding, ok bool, err error) {
	mode, err := ParseBindTo(string(o.BindTo))
	if err != nil {
		return nil, false, fmt.Errorf("plan bindings: %w", err)
	}
	if o.LocalRanks < 0 {
		return nil, false, fmt.Errorf("plan bindings: %d local ranks", o.LocalRanks)
	}
	count := o.GPUs
	if count == nil {
		count = func() int { return CountGPUs(sysroot) }
	}
	gpus := -1 // not counted yet
	switch {
	case mode == BindNone || mode == BindDefault && o.Oversubscribed:
	case mode == BindDefault && !o.Default.BindsWithoutGPUs():
		if gpus = count(); gpus > 0 {
			return nil, false, nil
		}
	default:
		return nil, false, nil
	}
	if gpus < 0 {
		gpus = count()
	}
	if gpus > 0 && o.OwnGPU {
		why := "--bind-to none"
		if mode == BindDefault {
			why = "the node is oversubscribed"
		}
		return nil, true, errOwnGPU(why)
	}
	var unplaced *GPUList
	if gpus == 0 {
		unplaced = o.Grant.list(VendorNVIDIA)
	}
	plan = make([]RankBinding, o.LocalRanks)
	for i := range plan {
		plan[i] = RankBinding{LocalRank: i, BindTo: BindNone, Unplaced: unplaced}
	}
	return plan, true, nil
}
