package hostfile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Filter is a DeepSpeed --include or --exclude expression, as
// "worker-0@worker-1:0,2": hosts separated by '@', each optionally followed by
// ':' and the GPU slot indices it concerns.
type Filter struct {
	Hosts []FilterHost // in the order written; no name twice
}

// FilterHost is one host of a [Filter].
type FilterHost struct {
	Name  string // host name, as in Host.Name
	Slots []int  // GPU slot indices in the order written, no duplicates; empty = the whole host
}

// String returns f in the syntax [ParseFilter] reads.
func (f Filter) String() string {
	var b strings.Builder
	for i, h := range f.Hosts {
		if i > 0 {
			b.WriteByte('@')
		}
		if strings.Contains(h.Name, ":") {
			b.WriteString("[" + h.Name + "]")
		} else {
			b.WriteString(h.Name)
		}
		for j, s := range h.Slots {
			if j == 0 {
				b.WriteByte(':')
			} else {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(s))
		}
	}
	return b.String()
}

// ParseFilter parses a DeepSpeed --include / --exclude expression. Each
// '@'-separated part is "host" or "host:i,j,..." with non-negative,
// distinct indices; an IPv6 address is written in brackets. Naming a host
// twice is an error.
func ParseFilter(s string) (Filter, error) {
	f, err := parseFilter(strings.Trim(s, blanks))
	if err != nil {
		return Filter{}, fmt.Errorf("hostfile: filter %q: %w", s, err)
	}
	return f, nil
}

func parseFilter(s string) (Filter, error) {
	if s == "" {
		return Filter{}, errorf("empty filter")
	}
	var f Filter
	seen := make(map[string]bool)
	for _, part := range strings.Split(s, "@") {
		if len(f.Hosts) >= maxHosts {
			return Filter{}, errorf("more than %d hosts", maxHosts)
		}
		fh, err := parseFilterHost(part)
		if err != nil {
			return Filter{}, err
		}
		if seen[fh.Name] {
			return Filter{}, errorf("host %s named twice", fh.Name)
		}
		seen[fh.Name] = true
		f.Hosts = append(f.Hosts, fh)
	}
	return f, nil
}

// parseFilterHost parses "host" or "host:i,j,...".
func parseFilterHost(part string) (FilterHost, error) {
	if part == "" {
		return FilterHost{}, errorf("empty host")
	}
	var fh FilterHost
	addr, rest, isV6, err := splitIPv6(part)
	if err != nil {
		return FilterHost{}, err
	}
	var list string
	var hasList bool
	if isV6 {
		fh.Name = addr
		if rest != "" {
			if list, hasList = strings.CutPrefix(rest, ":"); !hasList {
				return FilterHost{}, errorf("unexpected %q after IPv6 address", rest)
			}
		}
	} else {
		fh.Name, list, hasList = strings.Cut(part, ":")
		if err := checkName(fh.Name); err != nil {
			return FilterHost{}, err
		}
	}
	if !hasList {
		return fh, nil
	}
	items := strings.Split(list, ",")
	if len(items) > maxCount {
		return FilterHost{}, errorf("host %s: more than %d indices", fh.Name, maxCount)
	}
	fh.Slots = make([]int, 0, len(items))
	seen := make(map[int]bool, len(items))
	for _, item := range items {
		i, err := parseCount("GPU index", item, 0, maxCount)
		if err != nil {
			return FilterHost{}, fmt.Errorf("host %s: %w", fh.Name, err)
		}
		if seen[i] {
			return FilterHost{}, errorf("host %s: index %d given twice", fh.Name, i)
		}
		seen[i] = true
		fh.Slots = append(fh.Slots, i)
	}
	return fh, nil
}

// slotsOf returns the slot indices h offers: its GPUs, or 0..Slots-1 when
// GPUs is nil.
func slotsOf(h Host) []int {
	if h.GPUs != nil {
		return h.GPUs
	}
	s := make([]int, h.Slots)
	for i := range s {
		s[i] = i
	}
	return s
}

// describeSlots returns the slots h offers, for errors: "0-3" or "1,3".
func describeSlots(h Host) string {
	if h.GPUs == nil {
		if h.Slots < 1 {
			return "none"
		}
		return "0-" + strconv.Itoa(h.Slots-1)
	}
	parts := make([]string, len(h.GPUs))
	for i, g := range h.GPUs {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}

// lookup returns the filter entry for each host name of f, and an error
// naming the first filter host missing from hosts.
func (f Filter) lookup(hosts []Host, verb string) (map[string]FilterHost, error) {
	present := make(map[string]bool, len(hosts))
	names := make([]string, len(hosts))
	for i, h := range hosts {
		present[h.Name] = true
		names[i] = h.Name
	}
	byName := make(map[string]FilterHost, len(f.Hosts))
	for _, fh := range f.Hosts {
		if !present[fh.Name] {
			return nil, fmt.Errorf("hostfile: %w", &UnknownHostError{Name: fh.Name, Suggest: Closest(fh.Name, names), What: fmt.Sprintf("%s %q", verb, f)})
		}
		byName[fh.Name] = fh
	}
	return byName, nil
}

// checkSlots returns an error naming the first index of fh that h does not
// offer.
func checkSlots(h Host, fh FilterHost, verb string, f Filter) error {
	for _, i := range fh.Slots {
		ok := i >= 0 && i < h.Slots
		if h.GPUs != nil {
			ok = slices.Contains(h.GPUs, i)
		}
		if !ok {
			return fmt.Errorf("hostfile: %s %q: host %s has no slot %d (slots %s)", verb, f, h.Name, i, describeSlots(h))
		}
	}
	return nil
}

// Include returns the hosts f names, in the order of hosts. A host named
// with indices keeps only those slots: its Slots becomes the number of
// indices and its GPUs the indices. An index must be one of the host's slots
// (below its Slots, or among its GPUs when set). A host f names that is not
// in hosts is an error. hosts is not modified.
func Include(hosts []Host, f Filter) ([]Host, error) {
	byName, err := f.lookup(hosts, "include")
	if err != nil {
		return nil, err
	}
	var out []Host
	for _, h := range hosts {
		fh, ok := byName[h.Name]
		if !ok {
			continue
		}
		if len(fh.Slots) > 0 {
			if err := checkSlots(h, fh, "include", f); err != nil {
				return nil, err
			}
			h.Slots = len(fh.Slots)
			h.GPUs = slices.Clone(fh.Slots)
		}
		out = append(out, h)
	}
	return out, nil
}

// Exclude returns hosts without what f names. A host named without indices
// is removed; a host named with indices loses those slots: its Slots shrinks
// and its GPUs become the remaining indices, and it is removed when none
// remain. An index must be one of the host's slots (below its Slots, or among
// its GPUs when set). A host f names that is not in hosts is an error. hosts
// is not modified.
func Exclude(hosts []Host, f Filter) ([]Host, error) {
	byName, err := f.lookup(hosts, "exclude")
	if err != nil {
		return nil, err
	}
	var out []Host
	for _, h := range hosts {
		fh, ok := byName[h.Name]
		if !ok {
			out = append(out, h)
			continue
		}
		if len(fh.Slots) == 0 {
			continue
		}
		if err := checkSlots(h, fh, "exclude", f); err != nil {
			return nil, err
		}
		drop := make(map[int]bool, len(fh.Slots))
		for _, i := range fh.Slots {
			drop[i] = true
		}
		var left []int
		for _, i := range slotsOf(h) {
			if !drop[i] {
				left = append(left, i)
			}
		}
		if len(left) == 0 {
			continue
		}
		h.Slots = len(left)
		h.GPUs = left
		out = append(out, h)
	}
	return out, nil
}
