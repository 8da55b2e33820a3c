// Command gohang is a Go job that hangs on purpose: rank $HANG_RANK
// sleeps in napping until the file $HANG_RELEASE appears, while the
// others wait in an all-reduce. Each rank does a few quick all-reduces
// first, which rank $HANG_RANK enters late.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gorun/gorun/collectives"
)

//go:noinline
func napping() {
	for {
		if _, err := os.Stat(os.Getenv("HANG_RELEASE")); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func main() {
	ctx := context.Background()
	c, err := collectives.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	odd, _ := strconv.Atoi(os.Getenv("HANG_RANK"))
	buf := []float32{1}
	for i := 0; i < 5; i++ {
		if c.Rank() == odd {
			time.Sleep(20 * time.Millisecond)
		}
		if err := collectives.AllReduce(ctx, c, buf, collectives.Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Printf("up %d\n", c.Rank())
	if c.Rank() == odd {
		napping()
	}
	if err := collectives.AllReduce(ctx, c, buf, collectives.Sum); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("done %d\n", c.Rank())
}
