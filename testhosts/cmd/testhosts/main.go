// Command testhosts stands up a fake cluster of SSH hosts on this machine for
// gorun's benchmark scripts (see package github.com/gorun/gorun/testhosts).
// It needs root.
//
// Usage:
//
//	testhosts [--state DIR] up [--slots S] [--max-startups X] [--real-rc] [--kex ALGS] N
//	testhosts [--state DIR] down
//	testhosts [--state DIR] status
//	testhosts [--state DIR] exec hN CMD...   run CMD on hN without ssh
//	testhosts [--state DIR] head CMD...      run CMD on the head with the cluster in /etc/hosts
//	testhosts [--state DIR] env              print shell assignments (eval "$(testhosts env)")
//
// The state directory is --state, else $GORUN_TESTHOSTS_STATE, else
// gorun-testhosts under the temporary directory. `up` tears down a cluster
// already in it first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/testhosts"
)

const usage = `usage: testhosts [--state DIR] COMMAND
  up [--slots S] [--max-startups X] [--real-rc] [--kex ALGS] N
                  stand up hosts h1..hN (tears down a cluster already in DIR)
  down            tear the cluster down
  status          list the hosts and their sshd
  exec hN CMD...  run CMD on hN (its network, UTS and mount namespaces), no ssh
  head CMD...     run CMD on the head with the cluster in a private /etc/hosts
  env             print shell assignments of the cluster's paths
DIR is --state, else $GORUN_TESTHOSTS_STATE, else %s.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	def := filepath.Join(os.TempDir(), "gorun-testhosts")
	fs := flag.NewFlagSet("testhosts", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(os.Stderr, usage, def) }
	state := fs.String("state", "", "state directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *state == "" {
		*state = os.Getenv("GORUN_TESTHOSTS_STATE")
	}
	if *state == "" {
		*state = def
	}
	args = fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		err = up(*state, args[1:])
	case "down":
		err = down(*state)
	case "status":
		err = status(*state)
	case "exec", "head":
		return execCmd(*state, args[0], args[1:])
	case "env":
		err = env(*state)
	default:
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testhosts:", strings.TrimPrefix(err.Error(), "testhosts: "))
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError string

func (u usageError) Error() string { return string(u) }

func up(state string, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	slots := fs.Int("slots", 4, "slots per host in the hostfile")
	maxStartups := fs.String("max-startups", testhosts.DefaultMaxStartups, "sshd MaxStartups")
	realRC := fs.Bool("real-rc", false, "keep root's real ~/.bashrc and ~/.profile inside the hosts")
	kex := fs.String("kex", "", "KexAlgorithms for the client's ssh config (\"\": OpenSSH's default)")
	if err := fs.Parse(args); err != nil {
		return usageError("up: " + err.Error())
	}
	var n int
	if fs.NArg() != 1 {
		return usageError("usage: up [--slots S] [--max-startups X] [--real-rc] [--kex ALGS] N")
	}
	if _, err := fmt.Sscanf(fs.Arg(0), "%d", &n); err != nil || fmt.Sprint(n) != fs.Arg(0) {
		return usageError("up: N must be a number, not " + fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	c, err := testhosts.Up(ctx, testhosts.Options{Hosts: n, Slots: *slots, MaxStartups: *maxStartups, StateDir: state, KeepRealRC: *realRC, KexAlgorithms: *kex})
	if err != nil {
		return err
	}
	fmt.Printf("up %d: %s, head %s, ssh-verified in %d ms; state %s\n", n, c.Subnet, c.HeadIP, time.Since(t0).Milliseconds(), c.Dir)
	return nil
}

func down(state string) error {
	c, err := testhosts.Load(state)
	if err != nil {
		if _, serr := os.Stat(state); os.IsNotExist(serr) {
			fmt.Println("down: nothing to do")
			return nil
		}
		return err
	}
	t0 := time.Now()
	if err := c.Down(); err != nil {
		return err
	}
	fmt.Printf("down: removed %d hosts in %d ms\n", len(c.Hosts), time.Since(t0).Milliseconds())
	return nil
}

func status(state string) error {
	c, err := testhosts.Load(state)
	if err != nil {
		return err
	}
	br := "absent"
	if _, err := os.Stat("/sys/class/net/" + c.Bridge); err == nil {
		br = "present"
	}
	fmt.Printf("cluster %s: subnet %s, head %s, bridge %s %s, state %s\n", c.ID, c.Subnet, c.HeadIP, c.Bridge, br, c.Dir)
	bad := 0
	for _, h := range c.Hosts {
		alive := "running"
		if err := syscall.Kill(h.SSHDPid, 0); err != nil {
			alive, bad = "not running", bad+1
		} else if _, err := os.Stat("/run/netns/" + h.Netns); err != nil {
			alive, bad = "namespace gone", bad+1
		}
		fmt.Printf("%s %s netns=%s veth=%s sshd=%d %s\n", h.Name, h.IP, h.Netns, h.Veth, h.SSHDPid, alive)
	}
	if bad > 0 || br == "absent" {
		return fmt.Errorf("%d of %d hosts are not running", bad, len(c.Hosts))
	}
	return nil
}

// execCmd runs exec or head with the terminal, exiting with the command's
// status.
func execCmd(state, which string, args []string) int {
	c, err := testhosts.Load(state)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testhosts:", strings.TrimPrefix(err.Error(), "testhosts: "))
		return 1
	}
	var cmd *exec.Cmd
	switch {
	case which == "exec" && len(args) >= 2:
		cmd = c.Exec(context.Background(), args[0], args[1:]...)
	case which == "head" && len(args) >= 1:
		cmd = c.HeadCommand(context.Background(), args...)
	default:
		fmt.Fprintf(os.Stderr, "usage: testhosts %s\n", map[string]string{"exec": "exec hN CMD...", "head": "head CMD..."}[which])
		return 2
	}
	if cmd.Err != nil {
		fmt.Fprintln(os.Stderr, "testhosts:", strings.TrimPrefix(cmd.Err.Error(), "testhosts: "))
		return 1
	}
	// Replace this process, so that signals and the terminal go to CMD.
	path, err := exec.LookPath(cmd.Path)
	if err == nil {
		err = syscall.Exec(path, cmd.Args, os.Environ())
	}
	fmt.Fprintln(os.Stderr, "testhosts:", err)
	return 1
}

func env(state string) error {
	c, err := testhosts.Load(state)
	if err != nil {
		return err
	}
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	for _, kv := range [][2]string{
		{"GORUN_TESTHOSTS_STATE", c.Dir},
		{"TESTHOSTS_SSH_CONFIG", c.SSHConfig},
		{"TESTHOSTS_KNOWN_HOSTS", c.KnownHosts},
		{"TESTHOSTS_KEY", c.Key},
		{"TESTHOSTS_SSH", c.SSHWrapper},
		{"TESTHOSTS_HOSTFILE", c.Hostfile},
		{"TESTHOSTS_HEAD_HOSTS", c.HeadHosts},
		{"TESTHOSTS_SUBNET", c.Subnet},
		{"TESTHOSTS_HEAD_IP", c.HeadIP},
		{"TESTHOSTS_N", fmt.Sprint(len(c.Hosts))},
		{"TESTHOSTS_HOSTS", strings.Join(c.Names(), " ")},
	} {
		fmt.Printf("%s=%s\n", kv[0], q(kv[1]))
	}
	return nil
}
