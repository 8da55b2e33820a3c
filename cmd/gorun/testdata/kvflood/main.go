// Command kvflood is a Go rank that puts COUNT values of SIZE bytes into
// gorun's rendezvous store (keys r<rank>.<i>), says how many were taken
// and why the first refused one was, then fences and reads back every
// rank's first key: the store's budgets under a flood of puts.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/rendezvous"
)

// must ends the rank when err is not nil.
func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvflood:", err)
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) != 3 {
		must(fmt.Errorf("usage: kvflood COUNT SIZE"))
	}
	count, _ := strconv.Atoi(os.Args[1])
	size, _ := strconv.Atoi(os.Args[2])
	rank, _ := strconv.Atoi(os.Getenv("GORUN_RANK"))
	world, _ := strconv.Atoi(os.Getenv("GORUN_WORLD_SIZE"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := rendezvous.DialEnv(ctx)
	must(err)
	value := strings.Repeat("v", size)
	taken := 0
	for i := range count {
		if err := c.Put(fmt.Sprintf("r%d.%d", rank, i), value); err != nil {
			if taken == i {
				fmt.Printf("rank %d: put %d refused: %v\n", rank, i, err)
			}
			continue
		}
		taken++
	}
	fmt.Printf("rank %d: %d of %d puts taken\n", rank, taken, count)
	must(c.Fence(ctx))
	seen := 0
	for r := range world {
		if v, err := c.Get(fmt.Sprintf("r%d.0", r)); err == nil && len(v) == size {
			seen++
		}
	}
	fmt.Printf("rank %d: fence done, %d ranks' first keys seen\n", rank, seen)
	must(c.Close())
}
