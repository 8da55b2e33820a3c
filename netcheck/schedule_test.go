package netcheck

import "testing"

// Every pair of n ranks meets exactly once, no rank twice in a round, in
// n-1 rounds (even n) or n (odd n).
func TestRounds(t *testing.T) {
	for n := 0; n <= 33; n++ {
		rounds := Rounds(n)
		want := 0
		switch {
		case n >= 2 && n%2 == 0:
			want = n - 1
		case n >= 2:
			want = n
		}
		if len(rounds) != want {
			t.Errorf("n=%d: %d rounds, want %d", n, len(rounds), want)
		}
		seen := map[[2]int]int{}
		for r, round := range rounds {
			busy := map[int]bool{}
			for _, p := range round {
				if p[0] >= p[1] || p[0] < 0 || p[1] >= n {
					t.Errorf("n=%d round %d: pair %v", n, r, p)
				}
				if busy[p[0]] || busy[p[1]] {
					t.Errorf("n=%d round %d: pair %v shares a rank with another pair", n, r, p)
				}
				busy[p[0]], busy[p[1]] = true, true
				seen[p]++
				if Partner(round, p[0]) != p[1] || Partner(round, p[1]) != p[0] {
					t.Errorf("n=%d round %d: Partner disagrees with pair %v", n, r, p)
				}
			}
			if len(round) != n/2 {
				t.Errorf("n=%d round %d: %d pairs, want %d", n, r, len(round), n/2)
			}
			for k := range n {
				if !busy[k] && Partner(round, k) != -1 {
					t.Errorf("n=%d round %d: rank %d sits out, but Partner says %d", n, r, k, Partner(round, k))
				}
			}
		}
		if len(seen) != n*(n-1)/2 {
			t.Errorf("n=%d: %d distinct pairs, want %d", n, len(seen), n*(n-1)/2)
		}
		for p, k := range seen {
			if k != 1 {
				t.Errorf("n=%d: pair %v in %d rounds", n, p, k)
			}
		}
	}
}

// Pack keeps every pair, once, in rounds where no rank is busy twice, and
// needs no more rounds than the busiest rank has pairs when they share
// one rank.
func TestPack(t *testing.T) {
	for _, pairs := range [][][2]int{
		nil,
		{{0, 3}, {1, 3}, {2, 3}},
		{{0, 1}, {2, 3}, {0, 2}, {1, 3}},
		{{1, 2}},
	} {
		rounds := Pack(pairs)
		n := 0
		for r, round := range rounds {
			busy := map[int]bool{}
			for _, p := range round {
				if busy[p[0]] || busy[p[1]] {
					t.Errorf("%v: round %d: %v shares a rank", pairs, r, p)
				}
				busy[p[0]], busy[p[1]] = true, true
				n++
			}
		}
		if n != len(pairs) {
			t.Errorf("%v: %d pairs packed", pairs, n)
		}
	}
	if got := len(Pack([][2]int{{0, 3}, {1, 3}, {2, 3}})); got != 3 {
		t.Errorf("three pairs with rank 3: %d rounds, want 3", got)
	}
	if got := len(Pack([][2]int{{0, 1}, {2, 3}})); got != 1 {
		t.Errorf("two disjoint pairs: %d rounds, want 1", got)
	}
}
