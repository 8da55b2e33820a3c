// Command gospawn is the Go side of bench/spawnfloor.sh: it starts N
// /bin/true from G goroutines (splitting N), then waits for them all, and
// prints one TSV line with the time to start them and the time to start and
// reap them, in ms from the same start, then the CPU (user+system) of this
// process over that time and of the reaped children, in ms:
//
//	go-METHOD[-gG]	N	spawn_ms	total_ms	self_cpu_ms	children_cpu_ms
//
// METHOD is cmd (exec.Cmd.Start, then Cmd.Wait), startprocess
// (os.StartProcess, then Process.Wait) or forkexec (syscall.ForkExec, then
// syscall.Wait4), the last being what gorun's agent forks its ranks with.
// The children inherit stdin, stdout, stderr and the environment, as the C
// side's do (spawnfloor.c). It exits 1 when a start fails or a child does
// not exit 0.
//
// Usage: gospawn -method cmd|startprocess|forkexec -n N [-g G]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

const prog = "/bin/true"

// child is one started process, whichever way it was started.
type child struct {
	cmd  *exec.Cmd
	proc *os.Process
	pid  int
}

// starter starts one /bin/true.
type starter func() (child, error)

// waiter reaps one child and says whether it exited 0.
type waiter func(child) error

func main() {
	method := flag.String("method", "forkexec", "cmd, startprocess or forkexec")
	n := flag.Int("n", 1, "processes to start")
	g := flag.Int("g", 1, "goroutines that start them, each a share of -n")
	flag.Parse()
	start, wait, err := methods(*method)
	if err == nil && (*n < 1 || *g < 1) {
		err = fmt.Errorf("-n and -g must be at least 1 (got %d, %d)", *n, *g)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gospawn:", err)
		os.Exit(2)
	}
	self0 := cpuMS(syscall.RUSAGE_SELF)
	spawn, total, err := run(start, wait, *n, *g)
	self, kids := cpuMS(syscall.RUSAGE_SELF)-self0, cpuMS(syscall.RUSAGE_CHILDREN)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gospawn: %s, n=%d, g=%d: %v\n", *method, *n, *g, err)
		os.Exit(1)
	}
	name := "go-" + *method
	if *g > 1 {
		name += fmt.Sprintf("-g%d", *g)
	}
	fmt.Printf("%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\n", name, *n, ms(spawn), ms(total), self, kids)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// cpuMS is the user+system CPU, in ms, of this process (who: RUSAGE_SELF,
// every thread) or of its reaped children (RUSAGE_CHILDREN); 0 if getrusage
// fails.
func cpuMS(who int) float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(who, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

// methods returns how a method starts and reaps a child.
func methods(name string) (starter, waiter, error) {
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	switch name {
	case "cmd":
		return func() (child, error) {
				c := exec.Command(prog)
				c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
				return child{cmd: c}, c.Start()
			}, func(c child) error {
				return c.cmd.Wait()
			}, nil
	case "startprocess":
		return func() (child, error) {
				p, err := os.StartProcess(prog, []string{"true"}, &os.ProcAttr{Files: files})
				return child{proc: p}, err
			}, func(c child) error {
				st, err := c.proc.Wait()
				if err == nil && !st.Success() {
					err = fmt.Errorf("pid %d: %v", c.proc.Pid, st)
				}
				return err
			}, nil
	case "forkexec":
		attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}}
		return func() (child, error) {
				pid, err := syscall.ForkExec(prog, []string{"true"}, attr)
				return child{pid: pid}, err
			}, func(c child) error {
				var ws syscall.WaitStatus
				if _, err := syscall.Wait4(c.pid, &ws, 0, nil); err != nil {
					return fmt.Errorf("wait4 %d: %w", c.pid, err)
				}
				if !ws.Exited() || ws.ExitStatus() != 0 {
					return fmt.Errorf("pid %d: status %#x", c.pid, uint32(ws))
				}
				return nil
			}, nil
	}
	return nil, nil, fmt.Errorf("unknown method %q (cmd, startprocess or forkexec)", name)
}

// run starts n children from g goroutines, goroutine i starting n*i/g to
// n*(i+1)/g, then reaps them all from this one. It returns the time from
// its start to the last child started and to the last child reaped.
func run(start starter, wait waiter, n, g int) (spawn, total time.Duration, err error) {
	kids := make([]child, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range g {
		wg.Go(func() {
			for k := n * i / g; k < n*(i+1)/g; k++ {
				if kids[k], errs[k] = start(); errs[k] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	spawn = time.Since(t0)
	for k := range kids {
		if errs[k] != nil {
			err = fmt.Errorf("start %s: %w", prog, errs[k])
			continue
		}
		if kids[k] == (child{}) {
			continue // not started: its goroutine stopped at an error
		}
		if werr := wait(kids[k]); werr != nil && err == nil {
			err = fmt.Errorf("%s: %w", prog, werr)
		}
	}
	return spawn, time.Since(t0), err
}
