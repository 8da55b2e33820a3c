package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/internal/pluginbin"
	"github.com/gorun/gorun/launcher"
)

// gorun comes in two builds of this package. The full build (the default)
// has every command. The launcher build (-tags launcher_only, what `make
// build` installs as gorun) leaves out the commands that need Go's
// collective runtime and the plugin host, and with them go-plugin, gRPC
// and protobuf, whose package initialisation cost every gorun process,
// head and agent, 1.5-2 ms at start: gorun bench, gorun plugins, and a
// job's --plugin-check. For those it runs gorun-tools, the full build,
// which `make build` puts next to it.

// The usages of the commands that run in the full build, which the
// launcher build shows too.
const (
	benchUsage   = "measure a collective as nccl-tests does: time, algbw and busbw per size (gorun bench allreduce -np 4 -b 8 -e 256M -f 2)"
	pluginsUsage = "list the transport and collective plugins found, or test one (see gorun-plugin(7))"
)

// toolsBinary is the file name of the full build, next to gorun.
const toolsBinary = "gorun-tools"

// benchCollectives are the collectives gorun bench measures
// (collbench.Collectives, which the launcher build does not link; a test
// of the full build holds them equal), and benchAll asks for all of them.
var benchCollectives = []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier"}

const benchAll = "all"

// benchIndex returns where args hold "bench COLLECTIVE" after the job's
// flags, mpirun's order (gorun -np 4 bench allreduce), or -1.
func benchIndex(args []string) int {
	for i := 1; i+1 < len(args); i++ {
		if args[i] == "bench" && (slices.Contains(benchCollectives, args[i+1]) || args[i+1] == benchAll) {
			return i
		}
	}
	return -1
}

// findTools returns gorun-tools: next to this gorun's own binary, else
// in PATH.
func findTools() (string, error) {
	where := ""
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), toolsBinary)
		if pluginbin.IsExec(p) {
			return p, nil
		}
		where = "at " + p + " or "
	}
	p, err := exec.LookPath(toolsBinary)
	switch {
	case err == nil:
		return p, nil
	case !errors.Is(err, exec.ErrNotFound):
		return "", err
	}
	return "", fmt.Errorf("%s is not %sin $PATH", toolsBinary, where)
}

// execTools replaces this process with gorun-tools, given this process's
// own arguments (its name included, so that a personality such as mpirun
// stays one). It returns only on failure, with what a user needs to know:
// what asked for the full build, and how to get it.
func execTools(what string) error {
	path, err := findTools()
	if err == nil {
		err = syscall.Exec(path, os.Args, os.Environ())
	}
	return errExit{code: launcher.ExitUsage, err: fmt.Errorf("%s runs in %s, the full build of gorun (this gorun is the launcher build, which leaves out Go's collective runtime and the plugin host): %w; `make build` puts it next to gorun, or build it with `go build -o %s ./cmd/gorun`", what, toolsBinary, err, toolsBinary)}
}

// pluginCheckOn says whether the job asks for its plugin's preflight
// (--plugin-check, on by default when a job names a plugin).
func pluginCheckOn(c *cli.Context, o launcher.Options) (bool, error) {
	if o.Plugin.Name == "" || o.DryRun {
		return false, nil // no plugin: not even the configuration again (0.6 ms of every job)
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return false, err
	}
	return read(cfg).on("plugin-check"), nil
}
