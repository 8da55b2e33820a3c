package jobrecord

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// SkewItem is one thing that differs between hosts ("kernel", "NCCL",
// "MTU of eth0", "env NCCL_IB_HCA"), with each value and the hosts that
// have it.
type SkewItem struct {
	What string `json:"what"`
	// Values are the thing's values, the one that most hosts have first
	// (on a tie, the one that comes first in the hosts' order); the hosts
	// of any value that fewer hosts have than the first are the odd ones.
	Values []SkewValue `json:"values"`
}

// SkewValue is one value of a SkewItem and the hosts that have it ("" =
// absent/unset on those hosts).
type SkewValue struct {
	Value string `json:"value"`
	// Hosts are the hosts with the value, in the order FindSkew was
	// given them (the plan's).
	Hosts []string `json:"hosts"`
}

// Odd reports whether the hosts of v are odd ones out in item: fewer
// hosts have v than have the item's most common value.
func (item SkewItem) Odd(v SkewValue) bool {
	return len(item.Values) > 0 && len(v.Hosts) < len(item.Values[0].Hosts)
}

// SteeringEnvPrefixes start the names of the environment variables that
// [FindSkew] compares: those that steer NCCL, UCX, Open MPI (its MCA
// parameters, PMIx's and PRRTE's), MPICH and MVAPICH, Intel MPI,
// libfabric and the Hydra launcher. A variable set on some hosts only,
// or to different values, makes a job's ranks choose differently (an
// interface, a transport, a protocol) on different hosts.
//
// CUDA_VISIBLE_DEVICES is not compared: gorun sets it for each rank
// from its binding, and under Slurm the agent's is the node's own
// allocation, which differs between nodes by nature.
var SteeringEnvPrefixes = []string{
	"NCCL_", "UCX_", "OMPI_", "PMIX_MCA_", "PRTE_MCA_", "MPICH_", "MPIR_CVAR_", "MV2_",
	"I_MPI_", "FI_", "HYDRA_",
}

// perProcessEnvPrefixes start the names of variables under
// SteeringEnvPrefixes that a launcher sets for each process (gorun for
// each rank, mpirun for each of its processes): they differ between
// hosts by nature and steer nothing.
var perProcessEnvPrefixes = []string{
	"OMPI_COMM_WORLD_", "OMPI_UNIVERSE_SIZE", "OMPI_FIRST_RANKS", "OMPI_APP_CTX_", "OMPI_FILE_LOCATION",
	"OMPI_PARENT_PORT", "OMPI_MCA_ess_base_", "OMPI_MCA_orte_", "OMPI_MCA_prte_", "OMPI_MCA_pmix_",
	"MV2_COMM_WORLD_",
}

// steeringEnv reports whether FindSkew compares the variable name.
func steeringEnv(name string) bool {
	has := func(prefixes []string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	return has(SteeringEnvPrefixes) && !has(perProcessEnvPrefixes)
}

// FindSkew returns what differs between the hosts of infos (in the
// plan's order), each with its values and the hosts that have them: the
// versions of gorun, the kernel (its release, uname -r), the OS, the
// architecture, the NVIDIA driver, CUDA, NCCL, each MPI implementation
// and mpirun, and Python; each network interface's MTU (an interface
// that some hosts lack differs too: its MTU is "" there), and the speed
// and state of those that several hosts have; and the variables of
// [SteeringEnvPrefixes] ("" where unset). The interfaces of containers,
// virtual machines and tunnels (veth*, docker*, br-*, virbr*, ...) are
// not compared, nor are the variables a launcher sets for each process
// (OMPI_COMM_WORLD_RANK).
//
// Hosts that said nothing about themselves (no kernel, gorun or OS: a
// lost agent) are left out; so are hosts that did not tell their
// interfaces (Interfaces nil: an older gorun) from the interfaces'
// comparison, and hosts without Env from the environment's. Only things
// with more than one value come back, in the order above, interfaces
// and variables by name; nil when nothing differs.
func FindSkew(infos []HostInfo) []SkewItem {
	var hosts []*HostInfo
	for i := range infos {
		if answered(&infos[i]) {
			hosts = append(hosts, &infos[i])
		}
	}
	if len(hosts) < 2 {
		return nil
	}
	var items []SkewItem
	add := func(what string, value func(h *HostInfo) (v string, ok bool)) {
		if item, ok := skewOf(what, hosts, value); ok {
			items = append(items, item)
		}
	}
	for _, f := range versionFields {
		add(f.what, func(h *HostInfo) (string, bool) { return f.value(h), true })
	}
	for _, k := range keys(hosts, func(h *HostInfo) []string { return slices.Collect(maps.Keys(h.MPI)) }) {
		add(k, func(h *HostInfo) (string, bool) { return h.MPI[k], true })
	}
	ifaceSkew(hosts, add)
	steering := func(h *HostInfo) []string {
		var names []string
		for _, kv := range h.Env {
			if name, _, ok := strings.Cut(kv, "="); ok && steeringEnv(name) {
				names = append(names, name)
			}
		}
		return names
	}
	envs := map[*HostInfo]map[string]string{}
	for _, h := range hosts {
		if h.Env != nil {
			envs[h] = envMap(h.Env)
		}
	}
	for _, name := range keys(hosts, steering) {
		add("env "+name, func(h *HostInfo) (string, bool) {
			env, ok := envs[h]
			return env[name], ok
		})
	}
	return items
}

// versionFields are the versions that FindSkew compares, in its order.
var versionFields = []struct {
	what  string
	value func(h *HostInfo) string
}{
	{"gorun", func(h *HostInfo) string { return h.GorunVersion }},
	{"kernel", func(h *HostInfo) string { rel, _, _ := strings.Cut(h.Kernel, " "); return rel }},
	{"OS", func(h *HostInfo) string { return h.OS }},
	{"arch", func(h *HostInfo) string { return h.Arch }},
	{"driver", func(h *HostInfo) string { return h.Driver }},
	{"CUDA", func(h *HostInfo) string { return h.CUDA }},
	{"NCCL", func(h *HostInfo) string { return h.NCCL }},
	{"Python", func(h *HostInfo) string { return h.Python }},
}

// ifaceSkew adds, through add, each non-virtual interface's MTU, speed
// and state, by name.
func ifaceSkew(hosts []*HostInfo, add func(string, func(*HostInfo) (string, bool))) {
	names := keys(hosts, func(h *HostInfo) []string {
		var names []string
		for _, i := range h.Interfaces {
			if !virtualIface(i.Name) {
				names = append(names, i.Name)
			}
		}
		return names
	})
	for _, name := range names {
		find := func(h *HostInfo) (Iface, bool) {
			i := slices.IndexFunc(h.Interfaces, func(i Iface) bool { return i.Name == name })
			if i < 0 {
				return Iface{}, false
			}
			return h.Interfaces[i], true
		}
		add("MTU of "+name, func(h *HostInfo) (string, bool) {
			i, ok := find(h)
			switch {
			case h.Interfaces == nil:
				return "", false
			case !ok:
				return "", true
			}
			return strconv.Itoa(i.MTU), true
		})
		// A host without the interface says so in its MTU; one whose
		// link is down has no speed, and says so in its state.
		add("speed of "+name, func(h *HostInfo) (string, bool) {
			i, ok := find(h)
			return speed(i.SpeedMbps), ok && i.SpeedMbps > 0
		})
		add("state of "+name, func(h *HostInfo) (string, bool) {
			i, ok := find(h)
			return i.State, ok && i.State != ""
		})
	}
}

// speed prints a link's speed: "100Gb/s", "2.5Gb/s", "100Mb/s".
func speed(mbps int) string {
	if mbps >= 1000 {
		return strconv.FormatFloat(float64(mbps)/1000, 'f', -1, 64) + "Gb/s"
	}
	return strconv.Itoa(mbps) + "Mb/s"
}

// Skew returns what differs between the record's hosts (see
// [FindSkew]); a host whose environment the record keeps as its
// difference from the head's (see [Record.DiffEnv]) is compared with
// the head's environment changed so, and without the head's
// environment, not at all.
func (r *Record) Skew() []SkewItem {
	hosts := slices.Clone(r.Hosts)
	for i := range hosts {
		h := &hosts[i]
		if h.Env != nil || h.EnvDiff == nil || r.Head == nil || r.Head.Env == nil {
			continue
		}
		env := envMap(r.Head.Env)
		for _, name := range h.EnvDiff.Removed {
			delete(env, name)
		}
		for _, kv := range slices.Concat(h.EnvDiff.Added, h.EnvDiff.Changed) {
			if name, v, ok := strings.Cut(kv, "="); ok {
				env[name] = v
			}
		}
		h.Env = []string{}
		for name, v := range env {
			h.Env = append(h.Env, name+"="+v)
		}
	}
	return FindSkew(hosts)
}

// keys returns the sorted union of what of each host.
func keys(hosts []*HostInfo, of func(h *HostInfo) []string) []string {
	var all []string
	for _, h := range hosts {
		all = append(all, of(h)...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// skewOf compares value between the hosts for which it is ok, and
// reports whether they have more than one value; its values come most
// common first, then in the hosts' order.
func skewOf(what string, hosts []*HostInfo, value func(h *HostInfo) (string, bool)) (SkewItem, bool) {
	item := SkewItem{What: what}
	at := map[string]int{}
	for _, h := range hosts {
		v, ok := value(h)
		if !ok {
			continue
		}
		i, seen := at[v]
		if !seen {
			i = len(item.Values)
			at[v] = i
			item.Values = append(item.Values, SkewValue{Value: v})
		}
		item.Values[i].Hosts = append(item.Values[i].Hosts, cmp.Or(h.Host, h.Hostname))
	}
	slices.SortStableFunc(item.Values, func(a, b SkewValue) int { return cmp.Compare(len(b.Hosts), len(a.Hosts)) })
	return item, len(item.Values) > 1
}

// skewNames is how many of a value's hosts FormatSkew names.
const skewNames = 8

// FormatSkew prints items as FindSkew returns them, for a reader: a line
// that says how many things differ between how many hosts, then a line
// for each thing, its values most common first, each with its hosts
// (the first few of a long list) and "odd:" before the hosts of a value
// that fewer hosts have than the most common one. Without items it
// prints one line that says nothing differs.
func FormatSkew(w io.Writer, items []SkewItem) {
	if len(items) == 0 {
		fmt.Fprintln(w, "skew: none: versions, network interfaces and NCCL, UCX and MPI variables are the same on every host")
		return
	}
	var all []string
	for _, item := range items {
		for _, v := range item.Values {
			all = append(all, v.Hosts...)
		}
	}
	slices.Sort(all)
	differ := fmt.Sprintf("%d things differ", len(items))
	if len(items) == 1 {
		differ = "1 thing differs"
	}
	fmt.Fprintf(w, "skew: %s between the %d hosts\n", differ, len(slices.Compact(all)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, item := range items {
		var vals []string
		for _, v := range item.Values {
			names := v.Hosts[:min(len(v.Hosts), skewNames)]
			hosts := strings.Join(names, " ")
			if more := len(v.Hosts) - len(names); more > 0 {
				hosts += fmt.Sprintf(" and %d more", more)
			}
			if item.Odd(v) {
				hosts = "odd: " + hosts
			}
			vals = append(vals, fmt.Sprintf("%s (%s)", skewValue(item.What, v.Value), hosts))
		}
		fmt.Fprintf(tw, "  %s\t%s\n", item.What, strings.Join(vals, "   "))
	}
	tw.Flush()
}

// skewValue prints a value of the thing what: "" as what it means there
// (unset, absent, none), one with spaces, quotes or control characters
// quoted.
func skewValue(what, v string) string {
	switch {
	case v == "" && strings.HasPrefix(what, "env "):
		return "unset"
	case v == "" && strings.HasPrefix(what, "MTU of "):
		return "absent"
	case v == "":
		return "none"
	case strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == '"' || r == '(' || r == ')' || r == 0x7f }):
		return strconv.Quote(v)
	}
	return v
}
