package hostfile

import "strings"

// ParseHostList parses a -H host list: comma-separated items
// "[user@]host[:N]", a bare host having 1 slot, as in "a:2,b:2,alice@c".
// A host may use Slurm bracket ranges, which expand to one host per name
// with the item's user and slots ("node[01-04]:2"; commas inside brackets
// do not separate items). An IPv6 address is written in brackets
// ("[::1]:2"). A host named more than once has the sum of its slots, in the
// position of its first item; its items must agree on user. The list has no
// syntax for ports or max_slots: use a hostfile for those.
//
// Errors are [*LineError] values with File "-H", Line the 1-based item
// number and Text the item.
func ParseHostList(s string) ([]Host, error) {
	s = strings.Trim(s, blanks)
	if s == "" {
		return nil, &LineError{File: hostListTag, Err: errorf("empty host list")}
	}
	items, err := splitTop(s)
	if err != nil {
		return nil, &LineError{File: hostListTag, Err: errorf("host list %q: %v", s, err)}
	}
	m := newMerger("item")
	b := &budget{names: maxExpand, bytes: maxExpandBytes}
	for i, item := range items {
		item = strings.Trim(item, blanks)
		if err := parseItem(m, b, item, i+1); err != nil {
			return nil, &LineError{File: hostListTag, Line: i + 1, Text: item, Err: err}
		}
	}
	return m.hosts, nil
}

// parseItem adds the hosts of one -H item, number at, to m.
func parseItem(m *merger, b *budget, item string, at int) error {
	if item == "" {
		return errorf("empty item")
	}
	user, spec, err := splitUser(item)
	if err != nil {
		return err
	}
	addr, rest, isV6, err := splitIPv6(spec)
	if err != nil {
		return err
	}
	var names []string
	var slots string
	var haveSlots bool
	if isV6 {
		names = []string{addr}
		if rest != "" {
			if slots, haveSlots = strings.CutPrefix(rest, ":"); !haveSlots {
				return errorf("unexpected %q after IPv6 address", rest)
			}
		}
	} else {
		var host string
		host, slots, haveSlots = cutOutside(spec, ':')
		if names, err = expandItem(host, b); err != nil {
			return err
		}
	}
	n := 1
	if haveSlots {
		if n, err = parseCount("slots", slots, 1, maxCount); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := m.add(Host{Name: name, User: user, Slots: n}, at); err != nil {
			return err
		}
	}
	return nil
}

// cutOutside is strings.Cut at the first sep outside brackets.
func cutOutside(s string, sep byte) (before, after string, found bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case sep:
			if depth == 0 {
				return s[:i], s[i+1:], true
			}
		}
	}
	return s, "", false
}
