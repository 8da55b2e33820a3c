// Command rendezvous is a Go rank that finds its peers through gorun's
// key-value store: each rank puts its host name, fences, and reads every
// other rank's. Run it as `gorun -np 4 ./rendezvous` (build it with
// `go build ./examples/rendezvous`). With the argument "leave" rank 1
// drops its connection without Close, which ends the job.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gorun/gorun/rendezvous"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "examples/rendezvous:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := rendezvous.DialEnv(ctx)
	if err != nil {
		return err
	}
	rank, _ := strconv.Atoi(os.Getenv("GORUN_RANK"))
	size, _ := strconv.Atoi(os.Getenv("GORUN_WORLD_SIZE"))
	if len(os.Args) > 1 && os.Args[1] == "leave" && rank == 1 {
		os.Exit(0) // the connection closes without a goodbye
	}
	host, _ := os.Hostname()
	if err := c.Put("host."+strconv.Itoa(rank), host); err != nil {
		return err
	}
	if err := c.Fence(ctx); err != nil {
		return err
	}
	hosts := map[string]int{}
	for r := range size {
		h, err := c.Get("host." + strconv.Itoa(r))
		if err != nil {
			return fmt.Errorf("rank %d's host: %w", r, err)
		}
		hosts[h]++
	}
	if err := c.Fence(ctx); err != nil {
		return err
	}
	fmt.Printf("rank %d of %d saw %d ranks on %d hosts\n", rank, size, size, len(hosts))
	return c.Close()
}
