package netcheck

// Rounds returns the rounds of the circle method (a round-robin
// tournament) for n ranks: each round a set of disjoint pairs {a, b}
// with a < b, every pair of 0..n-1 in exactly one round. There are n-1
// rounds for even n and n for odd n, in which one rank a round sits out.
func Rounds(n int) [][][2]int {
	if n < 2 {
		return nil
	}
	m := n + n%2 // odd: a dummy rank n, whose partner sits out
	out := make([][][2]int, m-1)
	for r := range m - 1 {
		pair := func(a, b int) {
			if a == n || b == n {
				return
			}
			out[r] = append(out[r], [2]int{min(a, b), max(a, b)})
		}
		pair(m-1, r)
		for i := 1; i < m/2; i++ {
			pair((r+i)%(m-1), (r-i+m-1)%(m-1))
		}
	}
	return out
}

// Partner returns the rank that rank meets in round, or -1 when it sits
// the round out.
func Partner(round [][2]int, rank int) int {
	for _, p := range round {
		switch rank {
		case p[0]:
			return p[1]
		case p[1]:
			return p[0]
		}
	}
	return -1
}

// Pack puts pairs into rounds of disjoint pairs, each pair into the first
// round where neither of its ranks is busy, in the order given.
func Pack(pairs [][2]int) [][][2]int {
	var rounds [][][2]int
	var busy []map[int]bool
	for _, p := range pairs {
		r := 0
		for r < len(rounds) && (busy[r][p[0]] || busy[r][p[1]]) {
			r++
		}
		if r == len(rounds) {
			rounds = append(rounds, nil)
			busy = append(busy, map[int]bool{})
		}
		rounds[r] = append(rounds[r], p)
		busy[r][p[0]], busy[r][p[1]] = true, true
	}
	return rounds
}
