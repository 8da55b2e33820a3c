package rendezvous

import (
	"context"
	"fmt"
	"sync"
)

// localKV is what PMIServer and KVServer share: the host's cache of the job's
// key-values, the local ranks' puts pending for the next fence, and the
// barrier of the local ranks that turns into one Fencer call.
type localKV struct {
	fencer Fencer
	ranks  map[int]bool // local ranks

	mu      sync.Mutex
	cache   map[string]string
	pending map[string]string
	round   *localRound
	broken  error // set once a local rank is gone: every later barrier fails
}

type localRound struct {
	arrived map[int]bool
	done    chan struct{}
	err     error
}

func newLocalKV(fencer Fencer, ranks []int, preload map[string]string) (*localKV, error) {
	if fencer == nil {
		return nil, fmt.Errorf("rendezvous: no Fencer")
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("rendezvous: no local ranks")
	}
	l := &localKV{fencer: fencer, ranks: map[int]bool{}, cache: copyMap(preload), pending: map[string]string{}}
	for _, r := range ranks {
		if r < 0 || l.ranks[r] {
			return nil, fmt.Errorf("rendezvous: bad or duplicate local rank %d", r)
		}
		l.ranks[r] = true
	}
	return l, nil
}

func (l *localKV) put(key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cache[key] = value
	l.pending[key] = value
}

func (l *localKV) get(key string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.cache[key]
	return v, ok
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
	l.mu.Unlock()

	res, err := l.fencer.Fence(ctx, puts)
	l.mu.Lock()
	if err == nil {
		for k, v := range res {
			l.cache[k] = v
		}
	} else if l.broken == nil {
		l.broken = err
	}
	l.mu.Unlock()
	r.err = err
	close(r.done)
	return err
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
