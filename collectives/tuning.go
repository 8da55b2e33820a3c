package collectives

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/env"
)

// Collective names a collective operation in the algorithm table.
type Collective uint8

// The collectives that choose an algorithm.
const (
	CollAllReduce Collective = iota
	CollBroadcast
	CollReduce
	CollAllGather
	CollReduceScatter
	CollAllToAll
	CollBarrier
	numCollectives
)

// Internal operation kinds, carried in message headers next to the
// collectives above.
const (
	kindSplit Collective = numCollectives + iota
	kindSend
)

var collNames = [...]string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "barrier", "split", "send/recv"}

// String returns the collective's name in the table ("allreduce",
// "broadcast", ...).
func (c Collective) String() string {
	if int(c) < len(collNames) {
		return collNames[c]
	}
	return fmt.Sprintf("collective(%d)", uint8(c))
}

// Algorithm names an algorithm.
type Algorithm uint8

// The algorithms. [Collective.Algorithms] lists the ones each collective
// can run.
const (
	AlgoNone Algorithm = iota
	// AlgoRing: pipelined, chunked ring (reduce-scatter then allgather for
	// AllReduce).
	AlgoRing
	// AlgoRecursiveDoubling: pairwise exchanges at distances 1, 2, 4...;
	// ranks beyond a power of two fold into a partner first.
	AlgoRecursiveDoubling
	// AlgoRabenseifner: recursive-halving reduce-scatter then
	// recursive-doubling allgather.
	AlgoRabenseifner
	// AlgoBinomial: binomial tree.
	AlgoBinomial
	// AlgoChain: pipelined chain (a linear tree), segment by segment.
	AlgoChain
	// AlgoBinaryTree: pipelined binary tree, segment by segment.
	AlgoBinaryTree
	// AlgoScatterAllGather: binomial scatter then ring allgather.
	AlgoScatterAllGather
	// AlgoReduceScatterGather: ring reduce-scatter then gather at the root.
	AlgoReduceScatterGather
	// AlgoBruck: Bruck's algorithm (log steps, any rank count).
	AlgoBruck
	// AlgoRecursiveHalving: recursive-halving reduce-scatter.
	AlgoRecursiveHalving
	// AlgoLinear: every exchange posted at once, a bounded number in
	// flight.
	AlgoLinear
	// AlgoPairwise: one exchange per step with a different partner.
	AlgoPairwise
	// AlgoDissemination: dissemination barrier.
	AlgoDissemination
	// AlgoHierarchical: inside each host, then across hosts (one rank per
	// host or per local index), then inside again; see [Choice.Phases].
	AlgoHierarchical
	// AlgoPlugin: a collective plugin ran the operation (never chosen
	// from the table).
	AlgoPlugin
	numAlgorithms
)

var algoNames = [...]string{"none", "ring", "recursive-doubling", "rabenseifner", "binomial", "chain", "binary-tree",
	"scatter-allgather", "reducescatter-gather", "bruck", "recursive-halving", "linear", "pairwise", "dissemination", "hierarchical", "plugin"}

// String returns the algorithm's name in the table ("ring", ...).
func (a Algorithm) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

var collAlgos = [numCollectives][]Algorithm{
	CollAllReduce:     {AlgoRecursiveDoubling, AlgoRabenseifner, AlgoRing},
	CollBroadcast:     {AlgoBinomial, AlgoChain, AlgoBinaryTree, AlgoScatterAllGather},
	CollReduce:        {AlgoBinomial, AlgoChain, AlgoBinaryTree, AlgoReduceScatterGather},
	CollAllGather:     {AlgoRecursiveDoubling, AlgoBruck, AlgoRing},
	CollReduceScatter: {AlgoRecursiveHalving, AlgoRing},
	CollAllToAll:      {AlgoBruck, AlgoLinear, AlgoPairwise},
	CollBarrier:       {AlgoDissemination},
}

// Algorithms returns the flat algorithms the collective can run, in the
// order of the default table.
func (c Collective) Algorithms() []Algorithm {
	if c >= numCollectives {
		return nil
	}
	return append([]Algorithm(nil), collAlgos[c]...)
}

func (c Collective) runs(a Algorithm) bool {
	for _, b := range collAlgos[c] {
		if a == b {
			return true
		}
	}
	return false
}

// hierarchicalForm reports whether the collective has a hierarchical form.
func (c Collective) hierarchicalForm() bool {
	return c == CollAllReduce || c == CollBroadcast || c == CollReduce
}

// LinkClass is the kind of link an algorithm runs over: its thresholds and
// costs differ.
type LinkClass uint8

// The link classes.
const (
	// IntraHost: every rank involved is on one host (shared memory).
	IntraHost LinkClass = iota
	// InterHost: the ranks involved span hosts (network).
	InterHost
	numLinkClasses
)

// String returns "intra" or "inter", the names used in the table.
func (l LinkClass) String() string {
	switch l {
	case IntraHost:
		return "intra"
	case InterHost:
		return "inter"
	}
	return fmt.Sprintf("link(%d)", uint8(l))
}

// Unlimited is the MaxBytes of a [Tier] without an upper size bound.
const Unlimited int64 = -1

// Tier is one row of the algorithm table: the algorithm to run when the
// message size is at most MaxBytes and the rank count meets the conditions.
type Tier struct {
	// Algorithm is the algorithm to run.
	Algorithm Algorithm
	// MaxBytes is the largest message size, in bytes, the tier applies to,
	// or Unlimited. What the size measures depends on the collective; see
	// [Thresholds].
	MaxBytes int64
	// MinRanks and MaxRanks bound the number of ranks (0: no bound).
	MinRanks, MaxRanks int
	// Pow2 restricts the tier to power-of-two rank counts.
	Pow2 bool
}

func (t Tier) matches(ranks int, bytes int64) bool {
	return (t.MaxBytes == Unlimited || bytes <= t.MaxBytes) &&
		(t.MinRanks == 0 || ranks >= t.MinRanks) &&
		(t.MaxRanks == 0 || ranks <= t.MaxRanks) &&
		(!t.Pow2 || ranks&(ranks-1) == 0)
}

// String returns the tier in the table syntax, e.g. "bruck<=256B&n>=9".
func (t Tier) String() string {
	s := t.Algorithm.String()
	if t.MaxBytes != Unlimited {
		s += "<=" + FormatSize(t.MaxBytes)
	}
	if t.MinRanks > 0 {
		s += "&n>=" + strconv.Itoa(t.MinRanks)
	}
	if t.MaxRanks > 0 {
		s += "&n<=" + strconv.Itoa(t.MaxRanks)
	}
	if t.Pow2 {
		s += "&pow2"
	}
	return s
}

// Thresholds is the algorithm table: for each collective and link class, an
// ordered list of tiers; the first tier that matches the message size and
// rank count gives the algorithm, and when none matches the collective's
// last algorithm (the large-message one) runs. It also says whether the
// hierarchical forms may run. The zero value has no tiers and
// hierarchical forms off; start from [DefaultThresholds].
//
// The size a tier compares is, per collective: AllReduce, Broadcast and
// Reduce: the buffer; AllGather: the gathered (receive) buffer;
// ReduceScatter: the (send) buffer being reduced; AllToAll: one block, the
// bytes a rank sends to one peer; Barrier: 0.
//
// The text form, which String prints and Set parses, has one entry per
// line (or separated by ';'):
//
//	allreduce@inter=recursive-doubling<=8KiB,rabenseifner<=512KiB,ring
//	alltoall=bruck<=256B&n>=9,linear<=4KiB,pairwise
//	hierarchical=on
//
// An entry without "@intra" or "@inter" sets both classes. A tier is an
// algorithm name, optionally "<=SIZE" (bytes, or with a suffix B, K/KiB,
// M/MiB, G/GiB, all powers of 1024), and conditions joined by "&":
// "n>=N", "n<=N", "pow2".
//
// The environment variable GORUN_COLL_THRESHOLDS, in the same syntax, is
// applied over the defaults by [New] when [Options.Thresholds] is nil.
type Thresholds struct {
	// Hierarchical lets AllReduce, Broadcast and Reduce run in their
	// hierarchical forms when a communicator spans hosts and some host has
	// more than one of its ranks.
	Hierarchical bool
	rules        [numCollectives][numLinkClasses][]Tier
}

// EnvThresholds is the environment variable that overrides entries of the
// default algorithm table; see [Thresholds].
const EnvThresholds = env.CollThresholds

// DefaultThresholds returns the default table: Open MPI's and MPICH's
// tuned crossovers on 25-100 Gb/s clusters (gorun's runtime design,
// section 3.11) as the start, with the entries that bench/crossover.sh
// measured on gorun's own transports in their place
// (measuredThresholds). [CostModel.Thresholds] derives a table from
// measured link costs instead.
func DefaultThresholds() *Thresholds {
	t := &Thresholds{Hierarchical: true}
	def := map[Collective][]Tier{
		CollAllReduce: {
			{Algorithm: AlgoRecursiveDoubling, MaxBytes: 8 << 10},
			{Algorithm: AlgoRabenseifner, MaxBytes: 512 << 10},
			{Algorithm: AlgoRing, MaxBytes: Unlimited},
		},
		CollBroadcast: {
			{Algorithm: AlgoBinomial, MaxBytes: 16 << 10},
			{Algorithm: AlgoBinaryTree, MaxBytes: 512 << 10},
			{Algorithm: AlgoScatterAllGather, MaxBytes: Unlimited, MinRanks: 8},
			{Algorithm: AlgoChain, MaxBytes: Unlimited},
		},
		CollReduce: {
			{Algorithm: AlgoBinomial, MaxBytes: 16 << 10},
			{Algorithm: AlgoChain, MaxBytes: 512 << 10},
			{Algorithm: AlgoReduceScatterGather, MaxBytes: Unlimited},
		},
		CollAllGather: {
			{Algorithm: AlgoRecursiveDoubling, MaxBytes: 256 << 10, Pow2: true},
			{Algorithm: AlgoBruck, MaxBytes: 256 << 10},
			{Algorithm: AlgoRing, MaxBytes: Unlimited},
		},
		CollReduceScatter: {
			{Algorithm: AlgoRecursiveHalving, MaxBytes: 256 << 10},
			{Algorithm: AlgoRing, MaxBytes: Unlimited},
		},
		CollAllToAll: {
			{Algorithm: AlgoBruck, MaxBytes: 256, MinRanks: 9},
			{Algorithm: AlgoLinear, MaxBytes: 4 << 10},
			{Algorithm: AlgoPairwise, MaxBytes: Unlimited},
		},
		CollBarrier: {
			{Algorithm: AlgoDissemination, MaxBytes: Unlimited},
		},
	}
	for c, tiers := range def {
		for l := range numLinkClasses {
			t.rules[c][l] = append([]Tier(nil), tiers...)
		}
	}
	if err := t.Set(measuredThresholds); err != nil {
		panic(err)
	}
	return t
}

// measuredThresholds replaces entries of the starting table with the
// crossovers that bench/crossover.sh measured on gorun's own transports:
// each algorithm forced in turn, 1 KiB to 16 MiB, on 1 host x 2 and 4 ranks
// (shared memory: intra) and 2 and 4 network-namespace hosts x 1 rank
// (TCP over veth: inter), on the project's 2-vCPU VM (2026-11-21; the
// tables are in bench/README.md). Ranges with no clear winner between runs
// keep the algorithm of the neighbouring sizes; rank counts not measured
// (n >= 8) keep the starting table's tiers.
const measuredThresholds = `allreduce@intra=recursive-doubling<=16KiB,rabenseifner
allreduce@inter=recursive-doubling<=256KiB,ring&n<=2,rabenseifner
broadcast@intra=binomial&n<=4,binomial<=16KiB,binary-tree<=512KiB,scatter-allgather&n>=8,chain
broadcast@inter=chain<=256KiB&n<=4,binomial&n<=4,binomial<=16KiB,binary-tree<=512KiB,scatter-allgather&n>=8,chain
allgather@inter=recursive-doubling&pow2,bruck<=256KiB,ring
reducescatter@intra=recursive-halving
reducescatter@inter=recursive-halving<=1MiB,ring&n<=2,recursive-halving`

// Clone returns a deep copy of t.
func (t *Thresholds) Clone() *Thresholds {
	u := &Thresholds{Hierarchical: t.Hierarchical}
	for c := range t.rules {
		for l := range t.rules[c] {
			u.rules[c][l] = append([]Tier(nil), t.rules[c][l]...)
		}
	}
	return u
}

// Tiers returns a copy of the tiers of a collective and link class.
func (t *Thresholds) Tiers(c Collective, l LinkClass) []Tier {
	if c >= numCollectives || l >= numLinkClasses {
		return nil
	}
	return append([]Tier(nil), t.rules[c][l]...)
}

// SetTiers replaces the tiers of a collective and link class. It returns
// an error wrapping ErrInvalid for an algorithm the collective cannot run.
func (t *Thresholds) SetTiers(c Collective, l LinkClass, tiers []Tier) error {
	if c >= numCollectives || l >= numLinkClasses {
		return fmt.Errorf("%w: no collective %d or link class %d", ErrInvalid, c, l)
	}
	for _, tr := range tiers {
		if !c.runs(tr.Algorithm) {
			return fmt.Errorf("%w: %s cannot run algorithm %s (it runs %s)", ErrInvalid, c, tr.Algorithm, algoList(c))
		}
		if tr.MaxBytes < Unlimited {
			return fmt.Errorf("%w: %s: negative size", ErrInvalid, c)
		}
	}
	t.rules[c][l] = append([]Tier(nil), tiers...)
	return nil
}

func algoList(c Collective) string {
	var s []string
	for _, a := range collAlgos[c] {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}

// Select returns the flat algorithm the table gives for a collective over
// ranks ranks of a link class and a message of bytes bytes.
func (t *Thresholds) Select(c Collective, l LinkClass, ranks int, bytes int64) Algorithm {
	if c >= numCollectives || l >= numLinkClasses {
		return AlgoNone
	}
	for _, tr := range t.rules[c][l] {
		if tr.matches(ranks, bytes) {
			return tr.Algorithm
		}
	}
	a := collAlgos[c]
	return a[len(a)-1]
}

// String prints the table in the syntax Set parses: one line per
// collective and link class, then the hierarchical switch.
func (t *Thresholds) String() string {
	var b strings.Builder
	for c := range numCollectives {
		for l := range numLinkClasses {
			var tiers []string
			for _, tr := range t.rules[c][l] {
				tiers = append(tiers, tr.String())
			}
			fmt.Fprintf(&b, "%s@%s=%s\n", c, l, strings.Join(tiers, ","))
		}
	}
	if t.Hierarchical {
		b.WriteString("hierarchical=on\n")
	} else {
		b.WriteString("hierarchical=off\n")
	}
	return b.String()
}

// Set applies the entries of spec (the syntax of [Thresholds]) over t:
// each entry replaces the tiers of its collective and link class. On
// error, t is unchanged. Set and String make *Thresholds a flag.Value.
func (t *Thresholds) Set(spec string) error {
	u := t.Clone()
	for _, line := range strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == '\n' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := u.setEntry(line); err != nil {
			return fmt.Errorf("%w: %s: %q: %v", ErrInvalid, EnvThresholds, line, err)
		}
	}
	*t = *u
	return nil
}

func (t *Thresholds) setEntry(line string) error {
	name, value, ok := strings.Cut(line, "=")
	if !ok {
		return fmt.Errorf("want name=tiers")
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if name == "hierarchical" {
		switch value {
		case "on", "1", "true", "auto":
			t.Hierarchical = true
		case "off", "0", "false":
			t.Hierarchical = false
		default:
			return fmt.Errorf("hierarchical is on or off")
		}
		return nil
	}
	collName, className, hasClass := strings.Cut(name, "@")
	c, ok := parseCollective(collName)
	if !ok {
		return fmt.Errorf("unknown collective %q (want %s)", collName, strings.Join(collNames[:numCollectives], ", "))
	}
	classes := []LinkClass{IntraHost, InterHost}
	if hasClass {
		switch className {
		case "intra":
			classes = []LinkClass{IntraHost}
		case "inter":
			classes = []LinkClass{InterHost}
		default:
			return fmt.Errorf("unknown link class %q (want intra or inter)", className)
		}
	}
	var tiers []Tier
	for _, f := range strings.Split(value, ",") {
		tr, err := parseTier(c, strings.TrimSpace(f))
		if err != nil {
			return err
		}
		tiers = append(tiers, tr)
	}
	for _, l := range classes {
		if err := t.SetTiers(c, l, tiers); err != nil {
			return err
		}
	}
	return nil
}

func parseCollective(s string) (Collective, bool) {
	s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
	if s == "bcast" {
		return CollBroadcast, true
	}
	for c := range numCollectives {
		if collNames[c] == s {
			return c, true
		}
	}
	return 0, false
}

func parseTier(c Collective, s string) (Tier, error) {
	parts := strings.Split(s, "&")
	head := parts[0]
	tr := Tier{MaxBytes: Unlimited}
	algo, size, hasSize := strings.Cut(head, "<=")
	found := false
	for _, a := range collAlgos[c] {
		if a.String() == strings.TrimSpace(algo) {
			tr.Algorithm, found = a, true
		}
	}
	if !found {
		return tr, fmt.Errorf("%s cannot run algorithm %q (it runs %s)", c, algo, algoList(c))
	}
	if hasSize {
		n, err := ParseSize(size)
		if err != nil {
			return tr, err
		}
		tr.MaxBytes = n
	}
	for _, cond := range parts[1:] {
		cond = strings.TrimSpace(cond)
		switch {
		case cond == "pow2":
			tr.Pow2 = true
		case strings.HasPrefix(cond, "n>="):
			n, err := strconv.Atoi(cond[3:])
			if err != nil || n < 1 {
				return tr, fmt.Errorf("bad condition %q", cond)
			}
			tr.MinRanks = n
		case strings.HasPrefix(cond, "n<="):
			n, err := strconv.Atoi(cond[3:])
			if err != nil || n < 1 {
				return tr, fmt.Errorf("bad condition %q", cond)
			}
			tr.MaxRanks = n
		default:
			return tr, fmt.Errorf("unknown condition %q (want n>=N, n<=N or pow2)", cond)
		}
	}
	return tr, nil
}

// ParseSize parses a byte count: a number with an optional suffix B, K,
// KiB, M, MiB, G or GiB (powers of 1024; case does not matter).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q", s)
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30}
	sh, ok := shift[unit]
	if !ok || n > math.MaxInt64>>sh {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n << sh, nil
}

// FormatSize prints a byte count the way ParseSize reads it: with the
// largest binary unit that divides it exactly ("8KiB", "1536B").
func FormatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// LinkCost is the alpha-beta-gamma cost of one link class: sending m bytes
// costs Latency + m/Bandwidth, and reducing m bytes m/ReduceBandwidth.
type LinkCost struct {
	// Latency (alpha) is the cost of one message, start to finish.
	Latency time.Duration
	// Bandwidth (1/beta) is the bytes per second one rank moves.
	Bandwidth float64
	// ReduceBandwidth (1/gamma) is the bytes per second one rank reduces.
	ReduceBandwidth float64
}

// CostModel estimates the time of each algorithm from the cost of each
// link class. `gorun bench` measures the link costs; [CostModel.Thresholds]
// turns a model into an algorithm table.
type CostModel struct {
	// IntraHost is the cost of links between ranks on one host.
	IntraHost LinkCost
	// InterHost is the cost of links between hosts.
	InterHost LinkCost
	// ChunkBytes and SegmentBytes are the pipeline units the estimates
	// assume (see [Options]); 0 means the defaults.
	ChunkBytes, SegmentBytes int
}

// DefaultCostModel returns link costs typical of shared memory inside a
// host and of a 100 Gb/s network between hosts.
func DefaultCostModel() CostModel {
	return CostModel{
		IntraHost: LinkCost{Latency: time.Microsecond, Bandwidth: 10e9, ReduceBandwidth: 5e9},
		InterHost: LinkCost{Latency: 5 * time.Microsecond, Bandwidth: 10e9, ReduceBandwidth: 5e9},
	}
}

// Link returns the cost of a link class.
func (m CostModel) Link(l LinkClass) LinkCost {
	if l == InterHost {
		return m.InterHost
	}
	return m.IntraHost
}

func ceilLog2(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// Estimate returns the model's time for a flat algorithm of a collective
// over ranks ranks of a link class, with the size measured as [Thresholds]
// says. It returns 0 for an algorithm the collective cannot run.
func (m CostModel) Estimate(c Collective, a Algorithm, l LinkClass, ranks int, bytes int64) time.Duration {
	if ranks <= 1 || c >= numCollectives || !c.runs(a) {
		return 0
	}
	lc := m.Link(l)
	alpha := lc.Latency.Seconds()
	beta := 1 / lc.Bandwidth
	gamma := 1 / lc.ReduceBandwidth
	chunk := float64(orDefault(m.ChunkBytes, DefaultChunkBytes))
	seg := float64(orDefault(m.SegmentBytes, DefaultSegmentBytes))
	n := float64(ranks)
	S := float64(bytes)
	lg := float64(ceilLog2(ranks))
	p := float64(int(1) << (bits.Len(uint(ranks)) - 1))
	lp := math.Log2(p)
	fold := 0.0
	if p != n {
		fold = 1
	}
	k := math.Max(1, math.Ceil(S/seg))
	s := S / k
	depth := math.Floor(math.Log2(n))
	kids := math.Min(2, n-1)
	piece := math.Min(S/n, chunk)
	var t float64
	switch c {
	case CollAllReduce:
		switch a {
		case AlgoRecursiveDoubling:
			t = lp*(alpha+S*beta+S*gamma) + fold*(2*alpha+2*S*beta+S*gamma)
		case AlgoRabenseifner:
			t = 2*lp*alpha + 2*(p-1)/p*S*beta + (p-1)/p*S*gamma + fold*(2*alpha+2*S*beta+S*gamma)
		case AlgoRing:
			t = 2*(n-1)*alpha + 2*(n-1)/n*S*beta + (n-1)*piece*gamma
		}
	case CollBroadcast:
		switch a {
		case AlgoBinomial:
			t = lg * (alpha + S*beta)
		case AlgoChain:
			t = (n - 1 + k - 1) * (alpha + s*beta)
		case AlgoBinaryTree:
			t = (depth + k - 1) * kids * (alpha + s*beta)
		case AlgoScatterAllGather:
			t = (lg+n-1)*alpha + 2*(n-1)/n*S*beta
		}
	case CollReduce:
		switch a {
		case AlgoBinomial:
			t = lg * (alpha + S*beta + S*gamma)
		case AlgoChain:
			t = (n - 1 + k - 1) * (alpha + s*beta + s*gamma)
		case AlgoBinaryTree:
			t = (depth + k - 1) * kids * (alpha + s*beta + s*gamma)
		case AlgoReduceScatterGather:
			t = 2*(n-1)*alpha + 2*(n-1)/n*S*beta + (n-1)*piece*gamma
		}
	case CollAllGather:
		switch a {
		case AlgoRecursiveDoubling:
			t = lp*alpha + (p-1)/p*S*beta + fold*(2*alpha+(S/n+S)*beta)
		case AlgoBruck:
			t = lg*alpha + (n-1)/n*S*beta
		case AlgoRing:
			t = (n-1)*alpha + (n-1)/n*S*beta
		}
	case CollReduceScatter:
		switch a {
		case AlgoRecursiveHalving:
			t = lp*alpha + (p-1)/p*S*(beta+gamma) + fold*(2*alpha+S*(beta+gamma)+S/n*beta)
		case AlgoRing:
			t = (n-1)*alpha + (n-1)/n*S*beta + (n-1)*piece*gamma
		}
	case CollAllToAll:
		switch a {
		case AlgoBruck:
			t = lg * (alpha + n/2*S*beta)
		case AlgoLinear:
			t = math.Ceil((n-1)/DefaultWindow)*alpha + (n-1)*S*beta
		case AlgoPairwise:
			t = (n - 1) * (alpha + S*beta)
		}
	case CollBarrier:
		t = lg * alpha
	}
	return time.Duration(t * float64(time.Second))
}

// Thresholds derives an algorithm table for a communicator of ranks ranks
// from the model: for each collective and link class, the algorithm with
// the least estimate at each power-of-two size, adjacent sizes with the
// same winner merged into one tier.
func (m CostModel) Thresholds(ranks int) *Thresholds {
	t := &Thresholds{Hierarchical: true}
	for c := range numCollectives {
		for l := range numLinkClasses {
			var tiers []Tier
			for sh := -1; sh <= 34; sh++ {
				var size int64
				if sh >= 0 {
					size = 1 << sh
				}
				best, bestT := AlgoNone, time.Duration(math.MaxInt64)
				for _, a := range collAlgos[c] {
					if e := m.Estimate(c, a, l, ranks, size); e < bestT {
						best, bestT = a, e
					}
				}
				if n := len(tiers); n > 0 && tiers[n-1].Algorithm == best {
					tiers[n-1].MaxBytes = size
				} else {
					tiers = append(tiers, Tier{Algorithm: best, MaxBytes: size})
				}
			}
			tiers[len(tiers)-1].MaxBytes = Unlimited
			t.rules[c][l] = tiers
		}
	}
	return t
}

// Phase is one step of a hierarchical algorithm.
type Phase struct {
	// Collective is what the phase runs.
	Collective Collective
	// Class is the link class it runs over.
	Class LinkClass
	// Algorithm is the flat algorithm it runs.
	Algorithm Algorithm
	// Ranks is the number of ranks taking part (on this rank's host, for
	// the phases inside hosts).
	Ranks int
	// Bytes is its message size.
	Bytes int64
}

// Choice is the algorithm a communicator runs for a collective and size:
// the answer of [Communicator.Choose].
type Choice struct {
	// Collective is the collective asked about.
	Collective Collective
	// Bytes is the message size asked about, measured as [Thresholds]
	// says.
	Bytes int64
	// Ranks is the communicator's size.
	Ranks int
	// Class is InterHost when the communicator spans hosts.
	Class LinkClass
	// Algorithm is the flat algorithm, or AlgoHierarchical.
	Algorithm Algorithm
	// Phases are the steps of a hierarchical algorithm, in order.
	Phases []Phase
	// Estimate is the cost model's time for the choice.
	Estimate time.Duration
}

// String describes the choice on one line, e.g. "allreduce 1MiB over 8
// ranks (inter): ring, est. 1.2ms".
func (c Choice) String() string {
	s := fmt.Sprintf("%s %s over %d ranks (%s): %s", c.Collective, FormatSize(c.Bytes), c.Ranks, c.Class, c.Algorithm)
	if len(c.Phases) > 0 {
		var ph []string
		for _, p := range c.Phases {
			ph = append(ph, fmt.Sprintf("%s %s %s over %d", p.Class, p.Collective, p.Algorithm, p.Ranks))
		}
		s += " [" + strings.Join(ph, "; ") + "]"
	}
	return s + fmt.Sprintf(", est. %v", c.Estimate.Round(100*time.Nanosecond))
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}
