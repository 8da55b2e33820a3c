package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Default limits of a Store. They are generous because gorun's own clients
// store transport addresses; the PMI wire limits are enforced by PMIServer.
const (
	DefaultMaxKeyLen    = 1024
	DefaultMaxValueLen  = 1 << 20
	DefaultFenceTimeout = 5 * time.Minute
)

// ErrTooLarge is wrapped by errors about keys or values over a limit.
var ErrTooLarge = errors.New("rendezvous: key or value too large")

// StoreOptions are the limits and timeouts of a Store. Zero fields take the
// defaults.
type StoreOptions struct {
	// MaxKeyLen is the longest key in bytes (default DefaultMaxKeyLen).
	MaxKeyLen int
	// MaxValueLen is the longest value in bytes (default DefaultMaxValueLen).
	MaxValueLen int
	// Budget bounds the keys and bytes of one generation (zero fields:
	// DefaultJobBudget): a Put or a Fence whose puts would go over it
	// fails with a *BudgetError.
	Budget Budget
	// FenceTimeout is how long a fence may wait, counted from the first
	// member's arrival, before it fails for everyone (default
	// DefaultFenceTimeout).
	FenceTimeout time.Duration
}

func (o StoreOptions) withDefaults() StoreOptions {
	if o.MaxKeyLen <= 0 {
		o.MaxKeyLen = DefaultMaxKeyLen
	}
	if o.MaxValueLen <= 0 {
		o.MaxValueLen = DefaultMaxValueLen
	}
	o.Budget = o.Budget.or(DefaultJobBudget)
	if o.FenceTimeout <= 0 {
		o.FenceTimeout = DefaultFenceTimeout
	}
	return o
}

// FenceTimeoutError says that a fence did not complete in time and which
// members never arrived.
type FenceTimeoutError struct {
	Gen     int
	Missing []int
	Timeout time.Duration
}

// Error names the generation and the members that never arrived.
func (e *FenceTimeoutError) Error() string {
	return fmt.Sprintf("rendezvous: fence of generation %d timed out after %v; members that never arrived: %s",
		e.Gen, e.Timeout, joinInts(e.Missing))
}

// MemberLeftError says that a member left (or aborted) its generation, so no
// fence of that generation can complete.
type MemberLeftError struct {
	Gen    int
	Member int
	Reason string
}

// Error names the member that left and why.
func (e *MemberLeftError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("rendezvous: member %d left generation %d", e.Member, e.Gen)
	}
	return fmt.Sprintf("rendezvous: member %d left generation %d: %s", e.Member, e.Gen, e.Reason)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// Store is a job-wide key-value store with fences, kept separately for every
// restart generation. Its members (numbered 0..members-1) are typically the
// job's hosts: each calls Fence once per fence with its pending puts. A
// Store is safe for concurrent use.
type Store struct {
	members int
	opts    StoreOptions

	mu   sync.Mutex
	gens map[int]*generation
}

type generation struct {
	kv     map[string]string
	staged map[string]string // Put but not yet published by a fence
	round  *fenceRound       // fence in progress, nil if none
	left   *MemberLeftError  // first member to leave, nil if none
	fences int               // completed fences
	// keys and bytes measure what the generation holds once its puts are
	// published: every key in kv, staged and the round's puts, once, at
	// the size it was last put with.
	keys  int
	bytes int64
}

type fenceRound struct {
	arrived map[int]bool
	puts    map[string]string
	done    chan struct{}
	result  map[string]string
	err     error
	timer   *time.Timer
}

// NewStore returns a store whose fences wait for members members.
func NewStore(members int, opts StoreOptions) (*Store, error) {
	if members <= 0 {
		return nil, fmt.Errorf("rendezvous: store needs at least one member, got %d", members)
	}
	return &Store{members: members, opts: opts.withDefaults(), gens: map[int]*generation{}}, nil
}

// Members returns the number of members a fence waits for.
func (s *Store) Members() int { return s.members }

func (s *Store) gen(g int) *generation {
	x := s.gens[g]
	if x == nil {
		x = &generation{kv: map[string]string{}, staged: map[string]string{}}
		s.gens[g] = x
	}
	return x
}

func (s *Store) check(key, value string) error {
	if key == "" {
		return errors.New("rendezvous: empty key")
	}
	if len(key) > s.opts.MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (limit %d)", ErrTooLarge, len(key), s.opts.MaxKeyLen)
	}
	if len(value) > s.opts.MaxValueLen {
		return fmt.Errorf("%w: value of key %q has %d bytes (limit %d)", ErrTooLarge, key, len(value), s.opts.MaxValueLen)
	}
	return nil
}

// Put stages key=value in generation gen. It becomes visible to Get, and is
// delivered to every member, at the next fence of that generation. The head
// uses it for job-wide values it knows itself.
func (s *Store) Put(gen int, key, value string) error {
	if err := s.check(key, value); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gen(gen)
	if err := s.admitLocked(g, map[string]string{key: value}); err != nil {
		return err
	}
	g.staged[key] = value
	return nil
}

// sizeOf is the size key holds in g (key and latest value), if any.
func (g *generation) sizeOf(key string) (int, bool) {
	if g.round != nil {
		if v, ok := g.round.puts[key]; ok {
			return len(key) + len(v), true
		}
	}
	if v, ok := g.staged[key]; ok {
		return len(key) + len(v), true
	}
	v, ok := g.kv[key]
	return len(key) + len(v), ok
}

// admitLocked counts puts into g, or refuses them all with a
// *BudgetError when they would take it over the store's budget. s.mu
// must be held.
func (s *Store) admitLocked(g *generation, puts map[string]string) error {
	keys, bytes, grows := g.keys, g.bytes, false
	first := ""
	for k, v := range puts {
		old, had := g.sizeOf(k)
		if !had {
			keys++
		}
		bytes += int64(len(k)+len(v)) - int64(old)
		if !had || len(k)+len(v) > old {
			grows = true
			if first == "" || k < first {
				first = k
			}
		}
	}
	b := s.opts.Budget
	if grows && (keys > b.Keys || bytes > b.Bytes) {
		return &BudgetError{Rank: -1, Key: first, Job: true, Budget: b, Keys: keys, Bytes: bytes}
	}
	g.keys, g.bytes = keys, bytes
	return nil
}

// Get returns the value of key in generation gen as published by the last
// completed fence.
func (s *Store) Get(gen int, key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gens[gen]
	if g == nil {
		return "", false
	}
	v, ok := g.kv[key]
	return v, ok
}

// Fences returns how many fences of generation gen have completed.
func (s *Store) Fences(gen int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gens[gen]; g != nil {
		return g.fences
	}
	return 0
}

// Fence is member's arrival at the next fence of generation gen, carrying
// the puts it gathered since its previous fence. It returns when all members
// arrived, with every key-value published by this fence (all members' puts
// and the staged Puts), so that members can cache them and answer gets
// locally. It fails with a *FenceTimeoutError when the fence does not
// complete within the store's FenceTimeout, with a *MemberLeftError when a
// member left the generation, with a *BudgetError (for everyone) when the
// puts would take the generation over the store's Budget, and with the
// context's error when ctx ends (which also fails the fence for everyone,
// naming this member).
func (s *Store) Fence(ctx context.Context, gen, member int, puts map[string]string) (map[string]string, error) {
	kvs, err := s.FenceMany(ctx, gen, []int{member}, puts)
	if err != nil {
		return nil, err
	}
	return copyMap(kvs), nil
}

// FenceMany is the arrival of several members at once, with the puts of
// all of them: a launch tree's agent fences for its whole subtree. It
// returns what Fence returns, but not copied: every caller of a round gets
// the same map, which none may change (the head encodes it once for all).
func (s *Store) FenceMany(ctx context.Context, gen int, members []int, puts map[string]string) (map[string]string, error) {
	if len(members) == 0 {
		return nil, errors.New("rendezvous: a fence arrival for no member")
	}
	for _, member := range members {
		if member < 0 || member >= s.members {
			return nil, fmt.Errorf("rendezvous: member %d out of range [0,%d)", member, s.members)
		}
	}
	member := members[0]
	for k, v := range puts {
		if err := s.check(k, v); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	g := s.gen(gen)
	if g.left != nil {
		err := g.left
		s.mu.Unlock()
		return nil, err
	}
	if g.round != nil {
		for _, m := range members {
			if g.round.arrived[m] {
				s.mu.Unlock()
				return nil, fmt.Errorf("rendezvous: member %d arrived twice at fence %d of generation %d", m, g.fences+1, gen)
			}
		}
	}
	if err := s.admitLocked(g, puts); err != nil {
		// The fence cannot complete with these puts, nor without them:
		// it fails for everyone now rather than at its timeout.
		if g.round != nil {
			s.finishLocked(g, g.round, err)
		}
		s.mu.Unlock()
		return nil, err
	}
	r := g.round
	if r == nil {
		r = &fenceRound{arrived: map[int]bool{}, puts: map[string]string{}, done: make(chan struct{})}
		g.round = r
		timeout := s.opts.FenceTimeout
		r.timer = time.AfterFunc(timeout, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if g.round != r {
				return
			}
			var missing []int
			for m := 0; m < s.members; m++ {
				if !r.arrived[m] {
					missing = append(missing, m)
				}
			}
			s.finishLocked(g, r, &FenceTimeoutError{Gen: gen, Missing: missing, Timeout: timeout})
		})
	}
	for _, m := range members {
		r.arrived[m] = true
	}
	for k, v := range puts {
		r.puts[k] = v
	}
	if len(r.arrived) == s.members {
		for k, v := range g.staged {
			r.puts[k] = v
		}
		clear(g.staged)
		for k, v := range r.puts {
			g.kv[k] = v
		}
		r.result = r.puts
		g.fences++
		s.finishLocked(g, r, nil)
	}
	s.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		s.mu.Lock()
		if g.round == r {
			s.finishLocked(g, r, &MemberLeftError{Gen: gen, Member: member, Reason: "gave up waiting at a fence: " + ctx.Err().Error()})
		}
		s.mu.Unlock()
		<-r.done
		if r.err == nil {
			break // completed just before the cancel took effect
		}
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	return r.result, nil
}

// finishLocked ends round r with err (nil on success). s.mu must be held.
func (s *Store) finishLocked(g *generation, r *fenceRound, err error) {
	r.err = err
	r.timer.Stop()
	g.round = nil
	close(r.done)
}

// Leave removes member from generation gen: the fence in progress and every
// later fence of that generation fail at once with a *MemberLeftError naming
// member and reason. Aborts and dead hosts are reported this way. The first
// member to leave is the one named.
func (s *Store) Leave(gen, member int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gen(gen)
	if g.left == nil {
		g.left = &MemberLeftError{Gen: gen, Member: member, Reason: reason}
	}
	if g.round != nil {
		s.finishLocked(g, g.round, g.left)
	}
}

// Forget drops generation gen and everything stored in it; waiters of that
// generation fail as if a member left. The head calls it after a restart.
func (s *Store) Forget(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gens[gen]
	if g == nil {
		return
	}
	if g.round != nil {
		s.finishLocked(g, g.round, &MemberLeftError{Gen: gen, Member: -1, Reason: "generation forgotten"})
	}
	delete(s.gens, gen)
}

// Keys returns the published keys of generation gen, sorted.
func (s *Store) Keys(gen int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gens[gen]
	if g == nil {
		return nil
	}
	keys := make([]string, 0, len(g.kv))
	for k := range g.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Member returns a Fencer through which member takes part in the fences of
// generation gen. It is what an agent's PMIServer or KVServer uses when the
// store is in the same process (a single-host job, or tests).
func (s *Store) Member(gen, member int) Fencer {
	return storeMember{s: s, gen: gen, member: member}
}

type storeMember struct {
	s           *Store
	gen, member int
}

func (m storeMember) Fence(ctx context.Context, puts map[string]string) (*Published, error) {
	kvs, err := m.s.FenceMany(ctx, m.gen, []int{m.member}, puts)
	if err != nil {
		return nil, err
	}
	return NewPublished(kvs), nil
}

// Fencer is one host's view of the job-wide fence: Fence carries the host's
// puts since its previous fence and returns, once every host arrived, all
// key-values published by this fence. The agent implements it by sending one
// message to the head, where a Store answers.
type Fencer interface {
	Fence(ctx context.Context, puts map[string]string) (*Published, error)
}

func copyMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
