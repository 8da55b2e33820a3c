package collbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"

	"github.com/gorun/gorun/collectives"
)

// EnvConfig carries a `gorun bench` rank's Config, as JSON, from the head
// to every rank.
const EnvConfig = "GORUN_BENCH_CONFIG"

// RankMain is a `gorun bench` rank: it reads its Config from EnvConfig,
// joins the job's communicator, and runs it, rank 0 printing the results
// on standard output. It returns the process's exit status.
//
// Unless GOMAXPROCS is set, the rank runs with as many Ps as its host has
// CPUs per local rank: one rank per core, as MPI ranks run; more Ps only
// add idle threads that compete with the spinning ranks.
// GORUN_BENCH_CPUPROFILE=PREFIX writes each rank's CPU profile to
// PREFIX.RANK.
func RankMain() int {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(EnvConfig)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "gorun bench: %s: %v (a rank of gorun bench is started by gorun bench only)\n", EnvConfig, err)
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

// Save writes a report with write to the file path, to stdout when path
// is "-", or nowhere when path is "".
func Save(path string, stdout io.Writer, write func(io.Writer) error) error {
	switch path {
	case "":
		return nil
	case "-":
		return write(stdout)
	}
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
