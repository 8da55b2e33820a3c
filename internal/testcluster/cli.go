package testcluster

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CLI is the command line of a fixture's command:
//
//	NAME [--state DIR] up|down|status|env [ARGS]
//
// The state directory is --state, else $StateEnv, else gorun-NAME under
// the temporary directory.
type CLI struct {
	// Name is the command's name, which prefixes its errors.
	Name string
	// StateEnv names the variable that gives the state directory when
	// --state does not.
	StateEnv string
	// Usage is the usage text; its one %s is the default state directory.
	Usage string
	// Up, Down, Status and Env run the subcommands, given the state
	// directory and the arguments after the subcommand's name. An error
	// that is (or wraps) a UsageError exits 2, any other 1.
	Up, Down, Status, Env func(state string, args []string, stdout, stderr io.Writer) error
}

// Run runs the command line args and returns the exit status.
func (c CLI) Run(args []string, stdout, stderr io.Writer) int {
	def := filepath.Join(os.TempDir(), "gorun-"+c.Name)
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, c.Usage, def) }
	state := fs.String("state", "", "state directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *state == "" {
		*state = os.Getenv(c.StateEnv)
	}
	if *state == "" {
		*state = def
	}
	args = fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	cmds := map[string]func(string, []string, io.Writer, io.Writer) error{"up": c.Up, "down": c.Down, "status": c.Status, "env": c.Env}
	run := cmds[args[0]]
	if run == nil {
		fs.Usage()
		return 2
	}
	if err := run(*state, args[1:], stdout, stderr); err != nil {
		fmt.Fprintln(stderr, c.Name+":", strings.TrimPrefix(err.Error(), c.Name+": "))
		var u UsageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// UsageError is a bad command line (exit status 2).
type UsageError string

func (u UsageError) Error() string { return string(u) }

// NoArgs returns a UsageError if subcommand cmd got arguments.
func NoArgs(cmd string, args []string) error {
	if len(args) > 0 {
		return UsageError(fmt.Sprintf("%s takes no arguments, not %q", cmd, strings.Join(args, " ")))
	}
	return nil
}

// DownCommand is the down subcommand: it tears down the cluster that load
// finds in state and says so, naming it with what (such as "2 nodes"). A
// state directory that does not exist is nothing to do.
func DownCommand[C Downer](state string, args []string, stdout io.Writer, load func(string) (C, error), what func(C) string) error {
	if err := NoArgs("down", args); err != nil {
		return err
	}
	c, err := load(state)
	if err != nil {
		if _, serr := os.Stat(state); os.IsNotExist(serr) {
			fmt.Fprintln(stdout, "down: nothing to do")
			return nil
		}
		return err
	}
	t0 := time.Now()
	if err := c.Down(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "down: stopped %s in %d ms\n", what(c), time.Since(t0).Milliseconds())
	return nil
}

// PrintExports writes a shell export line for each "KEY=value" of env, then
// for each pair of more, the values quoted for sh.
func PrintExports(w io.Writer, env []string, more [][2]string) {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(w, "export %s=%s\n", k, q(v))
	}
	for _, kv := range more {
		fmt.Fprintf(w, "export %s=%s\n", kv[0], q(kv[1]))
	}
}
