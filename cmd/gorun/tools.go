package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/launcher"
)

// gorun is the launcher: what needs Go's collective runtime or the plugin
// host runs in gorun-tools, its companion program next to it, which gorun
// checks is of its own build (launcher.Tools): the ranks of gorun bench
// (gorun launches them as the job's program, launcher.ToolsProgram), gorun
// plugins (handed over whole) and a job's --plugin-check (run before the
// job).

// pluginsUsage is gorun plugins' line in gorun's help.
const pluginsUsage = "list the transport and collective plugins found, or test one (see gorun-plugin(7))"

// pluginsCommand is gorun plugins, which gorun-tools runs: its arguments,
// flags and help included, go there.
func pluginsCommand() *cli.Command {
	return &cli.Command{
		Name: "plugins", Usage: pluginsUsage, SkipFlagParsing: true, HideHelp: true,
		Action: func(c *cli.Context) error {
			return execTools(append([]string{"plugins"}, c.Args().Slice()...))
		},
	}
}

// execTools replaces this process with gorun-tools, given args. It
// returns only on failure.
func execTools(args []string) error {
	path, err := launcher.Tools()
	if err == nil {
		err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	}
	return errExit{code: launcher.ExitUsage, err: fmt.Errorf("gorun %s: %w", args[0], err)}
}

// runTools runs gorun-tools with args in a child process, its output to
// stdout and stderr, and returns its exit status; the error says why it
// could not run.
func runTools(ctx context.Context, stdout, stderr io.Writer, args ...string) (int, error) {
	path, err := launcher.Tools()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return 0, nil
}

// benchIndex returns where args hold "bench COLLECTIVE" after the job's
// flags, mpirun's order (gorun -np 4 bench allreduce), or -1.
func benchIndex(args []string) int {
	for i := 1; i+1 < len(args); i++ {
		if args[i] == "bench" && (slices.Contains(collbench.Collectives, args[i+1]) || args[i+1] == collbench.All) {
			return i
		}
	}
	return -1
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

// preflightPlugin runs the quick contract suite against the job's plugin
// on this host (gorun-tools preflight) when --plugin-check asks for it,
// before anything starts. gorun-tools says what failed; a plugin not
// found is a usage error, one that fails the suite stops the job.
func preflightPlugin(c *cli.Context, o launcher.Options, stdout, stderr io.Writer) error {
	if on, err := pluginCheckOn(c, o); err != nil || !on {
		return err
	}
	args := []string{"preflight"}
	for _, d := range o.Plugin.Dirs {
		args = append(args, "--plugin-dir", d)
	}
	code, err := runTools(c.Context, stdout, stderr, append(args, o.Plugin.Name)...)
	switch {
	case err != nil:
		return errExit{code: launcher.ExitUsage, err: fmt.Errorf("--plugin-check: %w", err)}
	case code == 0:
		return nil
	case code == launcher.ExitUsage:
		return errExit{code: launcher.ExitUsage}
	}
	return errExit{code: launcher.ExitLaunch}
}
