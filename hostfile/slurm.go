package hostfile

import (
	"fmt"
	"strconv"
	"strings"
)

// ExpandNodelist expands a Slurm nodelist such as SLURM_JOB_NODELIST into
// host names, in Slurm order, duplicates kept:
//
//	node[01-04,07],gpu-[1-2]  ->  node01 node02 node03 node04 node07 gpu-1 gpu-2
//
// A range keeps the zero padding of its low bound ("[08-11]" gives 08 09 10
// 11). Several bracket groups in one name multiply, the last varying fastest
// ("r[1-2]n[1-2]" gives r1n1 r1n2 r2n1 r2n2). An expansion of more than
// 1000000 names is refused before it is made.
func ExpandNodelist(s string) ([]string, error) {
	names, err := expandList(strings.Trim(s, blanks), &budget{names: maxExpand, bytes: maxExpandBytes})
	if err != nil {
		return nil, fmt.Errorf("hostfile: nodelist %q: %w", s, err)
	}
	return names, nil
}

// budget is what expansions may still produce.
type budget struct{ names, bytes int }

// expandList expands a comma-separated nodelist within b.
func expandList(s string, b *budget) ([]string, error) {
	if s == "" {
		return nil, errorf("empty nodelist")
	}
	items, err := splitTop(s)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, item := range items {
		more, err := expandItem(item, b)
		if err != nil {
			return nil, err
		}
		names = append(names, more...)
	}
	return names, nil
}

// splitTop splits s at the commas outside brackets, checking that brackets
// are balanced and not nested.
func splitTop(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if depth > 0 {
				return nil, errorf("nested '[' at offset %d", i)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, errorf("unbalanced ']' at offset %d", i)
			}
			depth--
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if depth > 0 {
		return nil, errorf("unbalanced '['")
	}
	return append(items, s[start:]), nil
}

// numRange is lo-hi of a bracket group, printed at least width digits wide.
type numRange struct {
	lo, hi uint64
	width  int
}

// segment is a literal piece of a name or, when ranges is non-nil, a bracket
// group.
type segment struct {
	lit    string
	ranges []numRange
	count  int // numbers in ranges
	width  int // widest number in ranges
}

// expandItem expands one nodelist item (no commas outside brackets) within
// b, which it charges, into names it has checked as host names.
func expandItem(item string, b *budget) ([]string, error) {
	if item == "" {
		return nil, errorf("empty host name")
	}
	var segs []segment
	total, length := 1, 0
	for rest := item; rest != ""; {
		open := strings.IndexByte(rest, '[')
		if open != 0 {
			lit := rest
			if open > 0 {
				lit = rest[:open]
			}
			for i := 0; i < len(lit); i++ {
				if !isNameByte(lit[i]) {
					return nil, errorf("bad host name %q: character %q not allowed", item, lit[i])
				}
			}
			segs = append(segs, segment{lit: lit})
			length += len(lit)
			rest = rest[len(lit):]
			continue
		}
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return nil, errorf("unbalanced '[' in %q", item)
		}
		seg, err := parseGroup(rest[1:end])
		if err != nil {
			return nil, err
		}
		if total > maxExpand/seg.count {
			return nil, errorf("%q expands to more than %d names", item, maxExpand)
		}
		total *= seg.count
		length += seg.width
		segs = append(segs, seg)
		rest = rest[end+1:]
	}
	switch {
	case total > b.names:
		return nil, errorf("%q makes the expansion exceed %d names", item, maxExpand)
	case length > maxNameLen:
		return nil, errorf("bad host name %q: longer than %d bytes", item, maxNameLen)
	case total*length > b.bytes:
		return nil, errorf("%q makes the expansion exceed %d bytes", item, maxExpandBytes)
	case segs[0].ranges == nil && segs[0].lit[0] == '-':
		return nil, errorf("bad host name %q: starts with '-'", item)
	}
	b.names -= total
	b.bytes -= total * length
	names := make([]string, 0, total)
	buf := make([]byte, 0, length)
	var walk func(i int, buf []byte)
	walk = func(i int, buf []byte) {
		if i == len(segs) {
			names = append(names, string(buf))
			return
		}
		s := segs[i]
		if s.ranges == nil {
			walk(i+1, append(buf, s.lit...))
			return
		}
		for _, r := range s.ranges {
			for n := r.lo; ; n++ {
				walk(i+1, appendPadded(buf, n, r.width))
				if n == r.hi {
					break
				}
			}
		}
	}
	walk(0, buf)
	return names, nil
}

// parseGroup parses the inside of a bracket group: "01-04,07".
func parseGroup(s string) (segment, error) {
	if s == "" {
		return segment{}, errorf("empty range \"[]\"")
	}
	var seg segment
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err := parseRangeNum(lo, part)
		if err != nil {
			return segment{}, err
		}
		b, err := parseRangeNum(hi, part)
		if err != nil {
			return segment{}, err
		}
		if a > b {
			return segment{}, errorf("reversed range %q", part)
		}
		if b-a >= maxExpand || seg.count+int(b-a+1) > maxExpand {
			return segment{}, errorf("range [%s] has more than %d numbers", s, maxExpand)
		}
		seg.count += int(b - a + 1)
		r := numRange{lo: a, hi: b, width: len(lo)}
		seg.width = max(seg.width, r.width, len(hi))
		seg.ranges = append(seg.ranges, r)
	}
	return seg, nil
}

// parseRangeNum parses one bound of a range; part is the range, for errors.
func parseRangeNum(s, part string) (uint64, error) {
	if s == "" || len(s) > maxDigits {
		return 0, errorf("bad range %q", part)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errorf("bad range %q", part)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

// appendPadded appends n in decimal, zero-padded to width digits.
func appendPadded(buf []byte, n uint64, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], n, 10)
	for i := len(d); i < width; i++ {
		buf = append(buf, '0')
	}
	return append(buf, d...)
}

// ParseTasksPerNode parses SLURM_TASKS_PER_NODE into one task count per node:
// "2(x3),1" gives [2 2 2 1]. Each item is "N" or "N(xM)" (N repeated M times),
// N and M at least 1. More than 1000000 counts are refused before they are
// made.
func ParseTasksPerNode(s string) ([]int, error) {
	counts, err := parseTasks(strings.Trim(s, blanks))
	if err != nil {
		return nil, fmt.Errorf("hostfile: tasks per node %q: %w", s, err)
	}
	return counts, nil
}

func parseTasks(s string) ([]int, error) {
	if s == "" {
		return nil, errorf("empty list")
	}
	type run struct{ n, times int }
	var runs []run
	total := 0
	for _, item := range strings.Split(s, ",") {
		num, rep, hasRep := strings.Cut(item, "(")
		n, err := parseCount("task count", num, 1, maxCount)
		if err != nil {
			return nil, err
		}
		times := 1
		if hasRep {
			inner, ok1 := strings.CutPrefix(rep, "x")
			inner, ok2 := strings.CutSuffix(inner, ")")
			if !ok1 || !ok2 {
				return nil, errorf("bad item %q (want N or N(xM))", item)
			}
			if times, err = parseCount("repeat", inner, 1, maxCount); err != nil {
				return nil, err
			}
		}
		if total += times; total > maxExpand {
			return nil, errorf("more than %d nodes", maxExpand)
		}
		runs = append(runs, run{n, times})
	}
	counts := make([]int, 0, total)
	for _, r := range runs {
		for range r.times {
			counts = append(counts, r.n)
		}
	}
	return counts, nil
}

// FromSlurm returns the hosts of a Slurm allocation from its nodelist
// (SLURM_JOB_NODELIST) and its tasks per node (SLURM_TASKS_PER_NODE): the
// n-th expanded name gets the n-th count as its Slots. Both must expand to
// the same number of entries. A name listed twice has its counts added.
func FromSlurm(nodelist, tasksPerNode string) ([]Host, error) {
	names, err := ExpandNodelist(nodelist)
	if err != nil {
		return nil, err
	}
	counts, err := ParseTasksPerNode(tasksPerNode)
	if err != nil {
		return nil, err
	}
	if len(names) != len(counts) {
		return nil, fmt.Errorf("hostfile: %w", errorf("nodelist %q has %d nodes but tasks per node %q has %d counts",
			nodelist, len(names), tasksPerNode, len(counts)))
	}
	m := newMerger("node")
	for i, name := range names {
		if err := m.add(Host{Name: name, Slots: counts[i]}, i+1); err != nil {
			return nil, fmt.Errorf("hostfile: nodelist %q: %w", nodelist, err)
		}
	}
	return m.hosts, nil
}
