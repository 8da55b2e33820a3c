package netrank

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/netcheck"
)

// Main is a `gorun check --net` rank: it reads its Config from
// netcheck.EnvConfig, joins the job's communicator and measures, rank 0
// printing the results on standard output. It returns the process's exit
// status.
func Main() int {
	var cfg netcheck.Config
	if err := json.Unmarshal([]byte(os.Getenv(netcheck.EnvConfig)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "gorun check --net: %s: %v (a rank of gorun check --net is started by gorun check --net only)\n", netcheck.EnvConfig, err)
		return 2
	}
	host := os.Getenv(env.Hostname)
	if host == "" {
		host, _ = os.Hostname()
	}
	ctx := context.Background()
	var node []byte
	if !cfg.NoNode {
		node = nodeReport(ctx, host, cfg.WithDefaults().NodeBudget)
	}
	comm, err := collectives.Init(ctx, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun check --net: %s: %v\n", host, err)
		return 1
	}
	err = Run(ctx, comm, cfg, host, node, os.Stdout)
	comm.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun check --net: rank %d (%s): %v\n", comm.Rank(), host, err)
		return 1
	}
	return 0
}
