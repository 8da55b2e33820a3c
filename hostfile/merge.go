package hostfile

// merger collects hosts in order of first appearance and adds up the slots of
// a host named again.
type merger struct {
	unit  string // "line" or "item", for conflict messages
	hosts []Host
	index map[string]int // Name -> position in hosts
	first []int          // line or item where each host first appeared
}

func newMerger(unit string) *merger {
	return &merger{unit: unit, index: make(map[string]int)}
}

// add merges h, seen at line (or item) at. A host seen before must agree on
// User, Port and MaxSlots.
func (m *merger) add(h Host, at int) error {
	i, seen := m.index[h.Name]
	if !seen {
		if len(m.hosts) >= maxHosts {
			return errorf("more than %d hosts", maxHosts)
		}
		m.index[h.Name] = len(m.hosts)
		m.hosts = append(m.hosts, h)
		m.first = append(m.first, at)
		return nil
	}
	old := &m.hosts[i]
	switch {
	case old.User != h.User:
		return errorf("host %s: user %q conflicts with user %q at %s %d", h.Name, h.User, old.User, m.unit, m.first[i])
	case old.Port != h.Port:
		return errorf("host %s: port %d conflicts with port %d at %s %d", h.Name, h.Port, old.Port, m.unit, m.first[i])
	case old.MaxSlots != h.MaxSlots:
		return errorf("host %s: max_slots %d conflicts with max_slots %d at %s %d", h.Name, h.MaxSlots, old.MaxSlots, m.unit, m.first[i])
	}
	sum := old.Slots + h.Slots
	if sum > maxCount {
		return errorf("host %s: more than %d slots in all", h.Name, maxCount)
	}
	if old.MaxSlots != 0 && sum > old.MaxSlots {
		return errorf("host %s: %d slots in all exceed max_slots=%d", h.Name, sum, old.MaxSlots)
	}
	old.Slots = sum
	return nil
}
