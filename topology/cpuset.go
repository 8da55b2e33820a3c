package topology

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/intranges"
)

// MaxCPUs bounds the CPU numbers a CPUSet accepts; Linux's own bound
// (NR_CPUS) is at most 8192 on current kernels.
const MaxCPUs = 1 << 16

// CPUSet is a set of logical CPU numbers. The zero value is the empty set.
// It formats and parses as a Linux cpulist ("0-3,8,10-11") and marshals
// to JSON and text in that form.
type CPUSet struct {
	words []uint64
}

// NewCPUSet returns the set of the given CPUs. It panics on a CPU number
// outside [0, MaxCPUs).
func NewCPUSet(cpus ...int) CPUSet {
	var s CPUSet
	for _, c := range cpus {
		s.Add(c)
	}
	return s
}

// ParseCPUList parses a Linux cpulist such as "0-3,8,10-11" or
// "0-15:2" (stride syntax) and returns its set. Blank input is the
// empty set; surrounding white space (a trailing newline) is ignored.
func ParseCPUList(s string) (CPUSet, error) {
	var set CPUSet
	s = strings.TrimSpace(s)
	if s == "" {
		return set, nil
	}
	for _, part := range strings.Split(s, ",") {
		rng, stride := part, 1
		if i := strings.IndexByte(part, ':'); i >= 0 {
			rng = part[:i]
			n, err := parseCPUNum(part[i+1:])
			if err != nil || n == 0 {
				return CPUSet{}, fmt.Errorf("cpulist %q: bad stride in %q", s, part)
			}
			stride = n
		}
		lo, hi := rng, rng
		if i := strings.IndexByte(rng, '-'); i >= 0 {
			lo, hi = rng[:i], rng[i+1:]
		} else if stride != 1 {
			return CPUSet{}, fmt.Errorf("cpulist %q: stride without range in %q", s, part)
		}
		a, err := parseCPUNum(lo)
		if err != nil {
			return CPUSet{}, fmt.Errorf("cpulist %q: %w", s, err)
		}
		b, err := parseCPUNum(hi)
		if err != nil {
			return CPUSet{}, fmt.Errorf("cpulist %q: %w", s, err)
		}
		if b < a {
			return CPUSet{}, fmt.Errorf("cpulist %q: range %q ends before it starts", s, rng)
		}
		for c := a; c <= b; c += stride {
			set.Add(c)
		}
	}
	return set, nil
}

func parseCPUNum(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("bad CPU number %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad CPU number %q", s)
	}
	if n >= MaxCPUs {
		return 0, fmt.Errorf("CPU number %d out of range (max %d)", n, MaxCPUs-1)
	}
	return n, nil
}

// Add puts cpu in the set. It panics on a CPU number outside [0, MaxCPUs).
func (s *CPUSet) Add(cpu int) {
	if cpu < 0 || cpu >= MaxCPUs {
		panic(fmt.Sprintf("topology: CPU number %d out of range", cpu))
	}
	w := cpu / 64
	for len(s.words) <= w {
		s.words = append(s.words, 0)
	}
	s.words[w] |= 1 << (uint(cpu) % 64)
}

// Contains reports whether cpu is in the set.
func (s CPUSet) Contains(cpu int) bool {
	if cpu < 0 || cpu/64 >= len(s.words) {
		return false
	}
	return s.words[cpu/64]&(1<<(uint(cpu)%64)) != 0
}

// Len returns the number of CPUs in the set.
func (s CPUSet) Len() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether the set has no CPU.
func (s CPUSet) IsEmpty() bool { return s.Len() == 0 }

// CPUs returns the set's CPU numbers in increasing order.
func (s CPUSet) CPUs() []int {
	var out []int
	for i, w := range s.words {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, i*64+b)
			w &^= 1 << uint(b)
		}
	}
	return out
}

// Union returns the CPUs in s or t.
func (s CPUSet) Union(t CPUSet) CPUSet {
	n := max(len(s.words), len(t.words))
	out := CPUSet{words: make([]uint64, n)}
	for i := range out.words {
		if i < len(s.words) {
			out.words[i] |= s.words[i]
		}
		if i < len(t.words) {
			out.words[i] |= t.words[i]
		}
	}
	return out
}

// Intersect returns the CPUs in both s and t.
func (s CPUSet) Intersect(t CPUSet) CPUSet {
	n := min(len(s.words), len(t.words))
	out := CPUSet{words: make([]uint64, n)}
	for i := range out.words {
		out.words[i] = s.words[i] & t.words[i]
	}
	return out
}

// Equal reports whether s and t hold the same CPUs.
func (s CPUSet) Equal(t CPUSet) bool {
	n := max(len(s.words), len(t.words))
	for i := 0; i < n; i++ {
		var a, b uint64
		if i < len(s.words) {
			a = s.words[i]
		}
		if i < len(t.words) {
			b = t.words[i]
		}
		if a != b {
			return false
		}
	}
	return true
}

// String formats the set as a Linux cpulist, ranges ascending
// ("0-3,8,10-11"), which is gorun's one format of integer sets
// (intranges); the empty set is "".
func (s CPUSet) String() string { return intranges.Format(s.CPUs()) }

// MarshalText formats the set as a cpulist.
func (s CPUSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a cpulist.
func (s *CPUSet) UnmarshalText(b []byte) error {
	v, err := ParseCPUList(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
