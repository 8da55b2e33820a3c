package hostfile

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// RankSlot is one line of an Open MPI rankfile: where one rank runs.
type RankSlot struct {
	// Rank is the rank the line places.
	Rank int
	// Host is the host's name; "" when the line names a host of the host
	// list by its position (Relative).
	Host string
	// Relative is the position K (from 0) of a host written +nK: the K-th
	// host of the job's host list; -1 when the line names Host.
	Relative int
	// Slot is where on the host the rank is bound (slot=...).
	Slot Slot
	// Line is the line's number in the file, for messages.
	Line int
}

// Slot is a rankfile's slot=: the cores a rank is bound to, as Open MPI
// writes them: PACKAGE:CORES (cores counted within the package, from 0)
// or CORES (cores counted over the whole host, package after package).
// CORES is a list of numbers and ranges (0,2-3) or "*" (every core).
type Slot struct {
	// Package is the package (socket) the cores are counted in, from 0;
	// -1 when they are counted over the whole host.
	Package int
	// Cores are the cores' logical numbers, ascending, without repeats;
	// nil means every core (of Package, or of the host).
	Cores []int
	// Text is the slot as written.
	Text string
}

// String returns the slot as written.
func (s Slot) String() string { return s.Text }

// ParseRankfileFile reads the rankfile at path with [ParseRankfile],
// naming path in errors.
func ParseRankfileFile(path string) ([]RankSlot, error) {
	return parseFile(path, "rankfile", ParseRankfile)
}

// ParseRankfile reads an Open MPI rankfile from r; name stands for the
// source in errors. Each line places one rank:
//
//	rank N=HOST slot=SLOT
//
// where HOST is a host name ([user@] is not taken) or +nK, the K-th host
// of the job's host list (from 0), and SLOT is described on [Slot]. '#'
// starts a comment; blank lines are ignored. The ranks must be 0 to N-1,
// each once, in any order; the result is in rank order.
func ParseRankfile(r io.Reader, name string) ([]RankSlot, error) {
	if name == "" {
		name = defaultName
	}
	var out []RankSlot
	seen := map[int]int{}
	err := eachEntry(r, name, func(n int, line string) error {
		rs, err := parseRankLine(line)
		if err == nil {
			if prev, dup := seen[rs.Rank]; dup {
				err = errorf("rank %d is placed on line %d already", rs.Rank, prev)
			}
		}
		if err == nil && len(out) >= maxHosts {
			err = errorf("more than %d ranks", maxHosts)
		}
		if err != nil {
			return &LineError{File: name, Line: n, Text: line, Err: err}
		}
		rs.Line = n
		seen[rs.Rank] = n
		out = append(out, rs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &LineError{File: name, Err: errorf("no ranks")}
	}
	sorted := make([]RankSlot, len(out))
	for _, rs := range out {
		if rs.Rank >= len(out) {
			return nil, &LineError{File: name, Line: rs.Line, Text: fmt.Sprintf("rank %d", rs.Rank),
				Err: errorf("rank %d of %d ranks: the ranks must be 0 to %d", rs.Rank, len(out), len(out)-1)}
		}
		sorted[rs.Rank] = rs
	}
	return sorted, nil
}

// parseRankLine parses "rank N=HOST slot=SLOT".
func parseRankLine(line string) (RankSlot, error) {
	rs := RankSlot{Relative: -1}
	// Blanks around '=' are allowed: "rank 0 = a slot = 1:0".
	f := strings.Fields(strings.ReplaceAll(line, "=", " = "))
	if len(f) < 4 || f[0] != "rank" || f[2] != "=" {
		return rs, errorf("want \"rank N=HOST slot=SLOT\"")
	}
	var err error
	if rs.Rank, err = parseCount("rank", f[1], 0, maxCount); err != nil {
		return rs, err
	}
	host := f[3]
	if k, ok := strings.CutPrefix(host, "+n"); ok {
		if rs.Relative, err = parseCount("+n host index", k, 0, maxHosts); err != nil {
			return rs, err
		}
	} else {
		if strings.Contains(host, "@") {
			return rs, errorf("bad host %q: a rankfile names hosts without a user (give it in -H or the hostfile)", host)
		}
		if err := checkName(strings.Trim(host, "[]")); err != nil {
			return rs, err
		}
		rs.Host = strings.Trim(host, "[]")
	}
	rest := f[4:]
	if len(rest) != 3 || rest[0] != "slot" || rest[1] != "=" {
		return rs, errorf("want \"slot=SLOT\" after the host")
	}
	rs.Slot, err = ParseSlot(rest[2])
	return rs, err
}

// ParseSlot parses a rankfile's SLOT: PACKAGE:CORES or CORES (see [Slot]).
func ParseSlot(s string) (Slot, error) {
	sl := Slot{Package: -1, Text: s}
	cores := s
	if pkg, c, ok := strings.Cut(s, ":"); ok {
		var err error
		if sl.Package, err = parseCount("package", pkg, 0, maxCount); err != nil {
			return sl, err
		}
		cores = c
	}
	if cores == "*" {
		return sl, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(cores, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCount("core", lo, 0, maxCount)
		if err != nil {
			return sl, err
		}
		b := a
		if isRange {
			if b, err = parseCount("core", hi, a, maxCount); err != nil {
				return sl, err
			}
		}
		if b-a+len(seen) > maxCount {
			return sl, errorf("slot %q names more than %d cores", s, maxCount)
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				sl.Cores = append(sl.Cores, c)
			}
		}
	}
	sortInts(sl.Cores)
	return sl, nil
}

// sortInts sorts a small slice of ints in place.
func sortInts(v []int) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// Resolve returns the host name of rank slot rs in the job's hosts: its
// Host, which must be one of them, or the Relative-th. The error names
// the closest host of the list when the name is not in it.
func (rs RankSlot) Resolve(hosts []Host) (string, error) {
	if rs.Relative >= 0 {
		if rs.Relative >= len(hosts) {
			return "", fmt.Errorf("rank %d on +n%d: the host list has %d hosts", rs.Rank, rs.Relative, len(hosts))
		}
		return hosts[rs.Relative].Name, nil
	}
	names := make([]string, len(hosts))
	for i, h := range hosts {
		if h.Name == rs.Host {
			return h.Name, nil
		}
		names[i] = h.Name
	}
	return "", &UnknownHostError{Name: rs.Host, Suggest: Closest(rs.Host, names), What: "rank " + strconv.Itoa(rs.Rank)}
}
