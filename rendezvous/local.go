package rendezvous

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// LocalFenceTimeoutError says that some of a host's ranks did not reach a
// barrier within the fence timeout after the first of them did.
type LocalFenceTimeoutError struct {
	Missing []int // the local ranks that never arrived
	Timeout time.Duration
}

// Error names the ranks that never arrived.
func (e *LocalFenceTimeoutError) Error() string {
	return fmt.Sprintf("rendezvous: fence timed out after %v; ranks that never arrived: %s", e.Timeout, joinInts(e.Missing))
}

// fenceWatch is what a local barrier does about ranks that never come.
type fenceWatch struct {
	// Timeout bounds a barrier from its first local arrival (0 = forever).
	Timeout time.Duration
	// OnTimeout is told which local ranks never arrived (once).
	OnTimeout func(missing []int)
}

// localKV is what PMIServer and KVServer share: the host's cache of the job's
// key-values, the local ranks' puts pending for the next fence, and the
// barrier of the local ranks that turns into one Fencer call. Puts are
// held to a budget per rank and to the job's, which the cache (every
// key the job published, and this host's pending ones) measures.
type localKV struct {
	fencer Fencer
	ranks  map[int]bool // local ranks
	watch  fenceWatch
	rank   Budget // what one local rank may put
	job    Budget // what the whole job may hold
	logf   func(format string, args ...any)

	mu sync.Mutex
	// What the host knows of the job's key-values: cache holds what was
	// preloaded and the local puts not yet published; pub what each fence
	// published, newest last, which a get looks in after cache. What they
	// hold together, each key counted once at its newest size, is
	// len(cache)+pubKeys-shadowKeys keys of cacheBytes+pubBytes-shadowBytes
	// bytes: shadow counts the keys of cache that pub has too.
	cache       map[string]string
	cacheBytes  int64 // keys and values in cache
	pub         []*Published
	pubKeys     int // distinct keys in pub
	pubBytes    int64
	shadowKeys  int
	shadowBytes int64
	pending     map[string]string
	mine        map[int]map[string]int // by local rank: the keys it put, and their sizes
	mineBytes   map[int]int64
	refused     map[int]bool // ranks whose refusal was logged
	round       *localRound
	broken      error // set once a local rank is gone: every later barrier fails
}

type localRound struct {
	arrived map[int]bool
	done    chan struct{}
	err     error
	timer   *time.Timer
}

func newLocalKV(fencer Fencer, ranks []int, preload map[string]string) (*localKV, error) {
	if fencer == nil {
		return nil, fmt.Errorf("rendezvous: no Fencer")
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("rendezvous: no local ranks")
	}
	l := &localKV{fencer: fencer, ranks: map[int]bool{}, cache: map[string]string{}, pending: map[string]string{},
		rank: DefaultRankBudget, job: DefaultJobBudget,
		mine: map[int]map[string]int{}, mineBytes: map[int]int64{}, refused: map[int]bool{}}
	for k, v := range preload {
		l.store(k, v)
	}
	for _, r := range ranks {
		if r < 0 || l.ranks[r] {
			return nil, fmt.Errorf("rendezvous: bad or duplicate local rank %d", r)
		}
		l.ranks[r] = true
	}
	return l, nil
}

// serverKV is what a server (KVServer, PMIServer) sets its local store
// up with.
type serverKV struct {
	fencer                Fencer
	ranks                 []int
	preload               map[string]string
	watch                 fenceWatch
	rankBudget, jobBudget Budget // zero fields: the defaults
	logf                  func(format string, args ...any)
}

// newServerKV makes a server's local store, and a counter of requests for
// each of its ranks (the map is fixed from then on).
func newServerKV(o serverKV) (*localKV, map[int]*atomic.Uint64, error) {
	local, err := newLocalKV(o.fencer, o.ranks, o.preload)
	if err != nil {
		return nil, nil, err
	}
	local.watch = o.watch
	local.setBudgets(o.rankBudget, o.jobBudget)
	local.logf = o.logf
	ops := map[int]*atomic.Uint64{}
	for _, r := range o.ranks {
		ops[r] = new(atomic.Uint64)
	}
	return local, ops, nil
}

// setBudgets sets the budgets; zero fields keep the defaults.
func (l *localKV) setBudgets(rank, job Budget) {
	l.rank, l.job = rank.or(DefaultRankBudget), job.or(DefaultJobBudget)
}

// store puts key=value in the cache, counting its bytes. l.mu must be
// held (or l not yet shared).
func (l *localKV) store(key, value string) {
	if old, ok := l.cache[key]; ok {
		l.cacheBytes -= int64(len(key) + len(old))
	} else if old, ok := l.published(key); ok {
		l.shadowKeys++
		l.shadowBytes += int64(len(key) + len(old))
	}
	l.cache[key] = value
	l.cacheBytes += int64(len(key) + len(value))
}

// published looks key up in what the fences published, newest first.
func (l *localKV) published(key string) ([]byte, bool) {
	for i := len(l.pub) - 1; i >= 0; i-- {
		if v, ok := l.pub[i].get(key); ok {
			return v, true
		}
	}
	return nil, false
}

// publish takes in what a fence published; fenced are this host's puts
// that it carried, which the cache no longer needs to hold. l.mu must be
// held.
func (l *localKV) publish(p *Published, fenced map[string]string) {
	if len(l.pub) > 0 {
		// A key an older fence published too is counted once, here.
		for i := range p.Len() {
			k, _ := p.entry(i)
			if old, ok := l.published(string(k)); ok {
				l.pubKeys--
				l.pubBytes -= int64(len(k) + len(old))
			}
		}
	}
	l.pub = append(l.pub, p)
	l.pubKeys += p.Len()
	l.pubBytes += p.size
	for k, v := range fenced {
		if cur, ok := l.cache[k]; ok && cur == v {
			if _, ok := p.get(k); ok {
				delete(l.cache, k)
				l.cacheBytes -= int64(len(k) + len(v))
			}
		}
	}
	// The cache's other keys that a fence published (preloaded ones, or
	// puts made again since) shadow them.
	l.shadowKeys, l.shadowBytes = 0, 0
	for k := range l.cache {
		if old, ok := l.published(k); ok {
			l.shadowKeys++
			l.shadowBytes += int64(len(k) + len(old))
		}
	}
}

// held is what the host holds of the job's key-values. l.mu must be held.
func (l *localKV) held() (keys int, bytes int64) {
	return len(l.cache) + l.pubKeys - l.shadowKeys, l.cacheBytes + l.pubBytes - l.shadowBytes
}

// lookup is key's newest value. l.mu must be held.
func (l *localKV) lookup(key string) (string, bool) {
	if v, ok := l.cache[key]; ok {
		return v, true
	}
	v, ok := l.published(key)
	return string(v), ok
}

// put stages rank's key=value for the next fence, or refuses it with a
// *BudgetError when it would take the rank or the job over its budget. A
// put that does not grow what is held (a key put again, no larger) is
// never refused.
func (l *localKV) put(rank int, key, value string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := len(key) + len(value)
	mine := l.mine[rank]
	old, had := mine[key]
	keys, bytes := len(mine), l.mineBytes[rank]-int64(old)+int64(size)
	if !had {
		keys++
	}
	grows := !had || size > old
	if grows && (keys > l.rank.Keys || bytes > l.rank.Bytes) {
		return l.refuse(&BudgetError{Rank: rank, Key: key, Budget: l.rank, Keys: keys, Bytes: bytes})
	}
	cached, inCache := l.lookup(key)
	jobKeys, jobBytes := l.held()
	jobBytes += int64(size)
	if inCache {
		jobBytes -= int64(len(key) + len(cached))
	} else {
		jobKeys++
	}
	if grows && (jobKeys > l.job.Keys || jobBytes > l.job.Bytes) {
		return l.refuse(&BudgetError{Rank: rank, Key: key, Job: true, Budget: l.job, Keys: jobKeys, Bytes: jobBytes})
	}
	if mine == nil {
		mine = map[string]int{}
		l.mine[rank] = mine
	}
	mine[key] = size
	l.mineBytes[rank] = bytes
	l.store(key, value)
	l.pending[key] = value
	return nil
}

// refuse logs a rank's first refused put (the rank may not show its
// error) and returns err. l.mu must be held.
func (l *localKV) refuse(err *BudgetError) error {
	if l.logf != nil && !l.refused[err.Rank] {
		l.refused[err.Rank] = true
		l.logf("%v", err)
	}
	return err
}

func (l *localKV) get(key string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lookup(key)
}

// barrier is rank's arrival at the next barrier. The last local rank to
// arrive runs the job-wide fence; everyone returns its result.
func (l *localKV) barrier(ctx context.Context, rank int) error {
	l.mu.Lock()
	if l.broken != nil {
		err := l.broken
		l.mu.Unlock()
		return err
	}
	r := l.round
	if r == nil {
		r = &localRound{arrived: map[int]bool{}, done: make(chan struct{})}
		l.round = r
		if l.watch.Timeout > 0 {
			r.timer = time.AfterFunc(l.watch.Timeout, func() { l.expire(r) })
		}
	}
	if r.arrived[rank] {
		l.mu.Unlock()
		return fmt.Errorf("rendezvous: rank %d entered the barrier twice", rank)
	}
	r.arrived[rank] = true
	if len(r.arrived) < len(l.ranks) {
		l.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	puts := l.pending
	l.pending = map[string]string{}
	l.round = nil
	if r.timer != nil {
		r.timer.Stop()
	}
	l.mu.Unlock()

	res, err := l.fencer.Fence(ctx, puts)
	l.mu.Lock()
	if err == nil {
		l.publish(res, puts)
	} else if l.broken == nil {
		l.broken = err
	}
	l.mu.Unlock()
	r.err = err
	close(r.done)
	return err
}

// expire fails round r if some local ranks still have not arrived.
func (l *localKV) expire(r *localRound) {
	l.mu.Lock()
	if l.round != r {
		l.mu.Unlock()
		return
	}
	var missing []int
	for rank := range l.ranks {
		if !r.arrived[rank] {
			missing = append(missing, rank)
		}
	}
	sort.Ints(missing)
	l.mu.Unlock()
	// The ranks that never arrived are reported before the waiting ones
	// learn of the failure: those exit at once, and their exits must not
	// reach the head before the report that names the culprits.
	if l.watch.OnTimeout != nil {
		l.watch.OnTimeout(missing)
	}
	l.gone(&LocalFenceTimeoutError{Missing: missing, Timeout: l.watch.Timeout})
}

// gone reports that rank will never arrive again: the barrier in progress
// and every later one fail with err.
func (l *localKV) gone(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken == nil {
		l.broken = err
	}
	if r := l.round; r != nil {
		l.round = nil
		r.err = l.broken
		close(r.done)
	}
}
