package rendezvous

import (
	"fmt"
	"strconv"
	"strings"
)

// Default budgets. Real jobs stay far below them: an MPICH rank puts one
// or two PMI-1 keys of a few hundred bytes (its shared-memory and network
// addresses; a value is at most PMIValLenMax), a Go rank's collectives put
// one key of about a kilobyte per Init, and PMIx puts one value per host
// and fence, which the agent sends itself and only the job's budget
// counts. A rank's budget still holds a value of the largest size
// (DefaultMaxValueLen) with room to spare, and the job's a million ranks'
// worth of MPICH keys.
const (
	DefaultRankKeys  = 4096
	DefaultRankBytes = 2 << 20
	DefaultJobKeys   = 1 << 20
	DefaultJobBytes  = 256 << 20
)

// Budget bounds what the store holds for one rank, or for a whole job,
// in one generation: at most Keys distinct keys, and Bytes of keys and
// values together (a key put again counts once, at its latest size).
// Zero fields take the defaults.
type Budget struct {
	Keys  int
	Bytes int64
	// Setting says how users change the budget, for the error that
	// refuses a put (for example "--kv-rank-budget"); "" says nothing.
	Setting string
}

// DefaultRankBudget and DefaultJobBudget are the budgets that zero fields
// take.
var (
	DefaultRankBudget = Budget{Keys: DefaultRankKeys, Bytes: DefaultRankBytes}
	DefaultJobBudget  = Budget{Keys: DefaultJobKeys, Bytes: DefaultJobBytes}
)

// or fills b's zero fields from def.
func (b Budget) or(def Budget) Budget {
	if b.Keys <= 0 {
		b.Keys = def.Keys
	}
	if b.Bytes <= 0 {
		b.Bytes = def.Bytes
	}
	return b
}

// String writes b as ParseBudget reads it: "4096,2MiB".
func (b Budget) String() string {
	size := formatBytes(b.Bytes)
	if n, unit, _ := strings.Cut(size, " "); unit == "byte" || unit == "bytes" {
		size = n
	}
	return strconv.Itoa(b.Keys) + "," + strings.ReplaceAll(size, " ", "")
}

// ParseBudget reads "KEYS,BYTES": a count of keys and a size in bytes,
// which may end in K, M or G (or KiB, MiB, GiB: powers of 1024). Both must
// be positive.
func ParseBudget(s string) (Budget, error) {
	keys, size, ok := strings.Cut(s, ",")
	if !ok {
		return Budget{}, fmt.Errorf("rendezvous: budget %q: want KEYS,BYTES (for example %s)", s, DefaultRankBudget)
	}
	k, err := strconv.Atoi(strings.TrimSpace(keys))
	if err != nil || k <= 0 {
		return Budget{}, fmt.Errorf("rendezvous: budget %q: %q is not a positive count of keys", s, keys)
	}
	n, err := parseBytes(strings.TrimSpace(size))
	if err != nil {
		return Budget{}, fmt.Errorf("rendezvous: budget %q: %w", s, err)
	}
	return Budget{Keys: k, Bytes: n}, nil
}

// parseBytes reads a positive size: digits, then K, M, G, KiB, MiB or GiB.
func parseBytes(s string) (int64, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	num := s[:i]
	if num == "" {
		return 0, fmt.Errorf("%q is not a positive size in bytes", s)
	}
	unit := int64(1)
	switch strings.TrimSpace(s[i:]) {
	case "", "B":
	case "K", "KiB":
		unit = 1 << 10
	case "M", "MiB":
		unit = 1 << 20
	case "G", "GiB":
		unit = 1 << 30
	default:
		return 0, fmt.Errorf("%q: the unit is none of K, M, G (KiB, MiB, GiB)", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/unit {
		return 0, fmt.Errorf("%q is not a positive size in bytes", s)
	}
	return n * unit, nil
}

// formatBytes writes n in the largest unit that divides it, else in
// bytes: "2 MiB", "1536 KiB", "100 bytes".
func formatBytes(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + " " + u.name
		}
	}
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// BudgetError refuses a put that would take a rank, or the whole job,
// over its budget. The put is dropped; the store is as before.
type BudgetError struct {
	Rank   int    // the rank that put; -1 when a host's fence brought the puts
	Key    string // the key refused (the first, for a fence)
	Job    bool   // the job's budget was spent, not the rank's
	Budget Budget
	// Keys and Bytes are what the rank or job would hold with the put.
	Keys  int
	Bytes int64
}

// Error names the budget, what the put would make of it, and how to raise
// it.
func (e *BudgetError) Error() string {
	who, whose := "the job", "the job's"
	if !e.Job {
		who, whose = fmt.Sprintf("rank %d", e.Rank), "its"
	}
	by := ""
	if e.Rank >= 0 {
		by = fmt.Sprintf(" by rank %d", e.Rank)
	}
	what := fmt.Sprintf("%d keys", e.Keys)
	if e.Bytes > e.Budget.Bytes {
		what = formatBytes(e.Bytes)
	}
	msg := fmt.Sprintf("rendezvous: put of key %q%s refused: %s would hold %s, over %s budget of %d keys and %s",
		truncate(e.Key, 64), by, who, what, whose, e.Budget.Keys, formatBytes(e.Budget.Bytes))
	if e.Budget.Setting != "" {
		msg += fmt.Sprintf(" (%s KEYS,BYTES raises it)", e.Budget.Setting)
	}
	return msg
}
