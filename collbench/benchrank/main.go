package benchrank

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/collectives"
)

// Main is a `gorun bench` rank: it reads its Config from collbench.EnvConfig,
// joins the job's communicator, and runs it, rank 0 printing the results
// on standard output. It returns the process's exit status.
//
// Unless GOMAXPROCS is set, the rank runs with as many Ps as its host has
// CPUs per local rank: one rank per core, as MPI ranks run; more Ps only
// add idle threads that compete with the spinning ranks.
// GORUN_BENCH_CPUPROFILE=PREFIX writes each rank's CPU profile to
// PREFIX.RANK.
func Main() int {
	var cfg collbench.Config
	if err := json.Unmarshal([]byte(os.Getenv(collbench.EnvConfig)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "gorun bench: %s: %v (a rank of gorun bench is started by gorun bench only)\n", collbench.EnvConfig, err)
		return 2
	}
	cfg.Out = os.Stdout
	if os.Getenv("GOMAXPROCS") == "" {
		local, _ := strconv.Atoi(os.Getenv("GORUN_LOCAL_WORLD_SIZE"))
		runtime.GOMAXPROCS(max(1, runtime.NumCPU()/max(local, 1)))
	}
	if prefix := os.Getenv("GORUN_BENCH_CPUPROFILE"); prefix != "" {
		if f, err := os.Create(prefix + "." + os.Getenv("GORUN_RANK")); err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	ctx := context.Background()
	comm, err := collectives.Init(ctx, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun bench: %v\n", err)
		return 1
	}
	_, err = Run(ctx, comm, cfg)
	comm.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun bench: rank %d: %v\n", comm.Rank(), err)
		return 1
	}
	return 0
}
