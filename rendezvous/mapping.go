package rendezvous

import (
	"fmt"
	"strings"
)

// ProcessMapping returns the PMI_process_mapping value for block placement:
// counts[i] consecutive ranks on node i, nodes in rank order. Runs of nodes
// with equal counts share one (S,C,P) block: [4] gives "(vector,(0,1,4))",
// [2,2] gives "(vector,(0,2,2))" and [1,3] gives "(vector,(0,1,1),(1,1,3))".
// Nodes with no ranks are skipped (they hold no node number).
func ProcessMapping(counts []int) (string, error) {
	var nodeOf []int
	node := 0
	for i, c := range counts {
		if c < 0 {
			return "", fmt.Errorf("rendezvous: node %d has %d ranks", i, c)
		}
		if c == 0 {
			continue
		}
		for j := 0; j < c; j++ {
			nodeOf = append(nodeOf, node)
		}
		node++
	}
	return ProcessMappingOf(nodeOf)
}

type mapBlock struct{ start, nodes, per int }

// ProcessMappingOf returns the PMI_process_mapping value for any placement:
// nodeOf[r] is the node number of rank r. Consecutive ranks on one node form
// runs, runs of equal length on consecutive nodes form (S,C,P) blocks, and a
// block list that repeats is written once, since MPICH wraps around it: cyclic
// placement over k nodes gives "(vector,(0,k,1))".
func ProcessMappingOf(nodeOf []int) (string, error) {
	if len(nodeOf) == 0 {
		return "", fmt.Errorf("rendezvous: no ranks to map")
	}
	var blocks []mapBlock
	for i := 0; i < len(nodeOf); {
		n := nodeOf[i]
		if n < 0 {
			return "", fmt.Errorf("rendezvous: rank %d on node %d", i, n)
		}
		j := i
		for j < len(nodeOf) && nodeOf[j] == n {
			j++
		}
		run := j - i
		if k := len(blocks) - 1; k >= 0 && blocks[k].per == run && blocks[k].start+blocks[k].nodes == n {
			blocks[k].nodes++
		} else {
			blocks = append(blocks, mapBlock{start: n, nodes: 1, per: run})
		}
		i = j
	}
	blocks = shortestPeriod(blocks)
	var b strings.Builder
	b.WriteString("(vector")
	for _, bl := range blocks {
		fmt.Fprintf(&b, ",(%d,%d,%d)", bl.start, bl.nodes, bl.per)
	}
	b.WriteString(")")
	return b.String(), nil
}

// shortestPeriod returns the shortest prefix of blocks whose repetition gives
// blocks (the last repetition may be cut short only at a block boundary).
func shortestPeriod(blocks []mapBlock) []mapBlock {
	for p := 1; p < len(blocks); p++ {
		ok := true
		for i := p; i < len(blocks) && ok; i++ {
			ok = blocks[i] == blocks[i%p]
		}
		if ok {
			return blocks[:p]
		}
	}
	return blocks
}

// ParseProcessMapping reads a PMI_process_mapping value as MPICH does and
// returns the node number of each of size ranks: blocks (S,C,P) in order,
// wrapping around when they cover fewer than size ranks. It is the inverse
// of [ProcessMappingOf].
func ParseProcessMapping(s string, size int) ([]int, error) {
	bad := func(why string) error { return fmt.Errorf("rendezvous: process mapping %q: %s", s, why) }
	if size <= 0 {
		return nil, bad("no ranks")
	}
	body, ok := strings.CutPrefix(s, "(vector")
	if !ok || !strings.HasSuffix(body, ")") {
		return nil, bad("not a (vector,...) value")
	}
	body = strings.TrimSuffix(body, ")")
	var blocks []mapBlock
	for body != "" {
		rest, ok := strings.CutPrefix(body, ",(")
		if !ok {
			return nil, bad("expected ,(S,C,P)")
		}
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			return nil, bad("unclosed block")
		}
		var b mapBlock
		var tail string
		if n, _ := fmt.Sscanf(rest[:end], "%d,%d,%d%s", &b.start, &b.nodes, &b.per, &tail); n != 3 || b.start < 0 || b.nodes <= 0 || b.per <= 0 {
			return nil, bad("block (" + rest[:end] + ")")
		}
		if b.start > size || b.nodes > size || b.per > size {
			return nil, bad("block (" + rest[:end] + ") is larger than the job")
		}
		blocks = append(blocks, b)
		body = rest[end+1:]
	}
	if len(blocks) == 0 {
		return nil, bad("no blocks")
	}
	nodeOf := make([]int, 0, size)
	for len(nodeOf) < size {
		for _, b := range blocks {
			for n := b.start; n < b.start+b.nodes && len(nodeOf) < size; n++ {
				for j := 0; j < b.per && len(nodeOf) < size; j++ {
					nodeOf = append(nodeOf, n)
				}
			}
		}
	}
	return nodeOf, nil
}
