// Command shmrank is the program of cmd/gorun's TestShmSweepAttack: it maps
// files in /dev/shm as an MPI rank maps segments, and then rank 1 fails,
// so that the agent kills rank 0 and sweeps what it had mapped.
//
//	shmrank rank DIR PREFIX   the job's program (GORUN_RANK says which)
//	shmrank hold PATH         another job's process: makes PATH, maps it,
//	                          prints "ready" and holds it until stdin ends
//
// Rank 0 maps /dev/shm/PREFIX-own (the user's file from before the job),
// PREFIX-other (another user's), PREFIX-link (a symlink to PREFIX-target,
// the user's from before); makes and maps its own segment PREFIX-seg and
// PREFIX-dir/seg; writes DIR/started; waits for PREFIX-job2 (another
// job's, made after the rank started) and maps it; writes DIR/mapped and
// waits to be killed. Told SIGTERM, it first swaps PREFIX-dir for a
// symlink to DIR/keep, as an attacker racing the sweep would. Rank 1
// waits for DIR/mapped and exits 1.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

const shm = "/dev/shm/"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "shmrank:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "hold":
		if _, err := mapFile(args[1], true); err != nil {
			return err
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		return nil
	case len(args) == 3 && args[0] == "rank" && os.Getenv("GORUN_RANK") == "1":
		if err := waitFor(filepath.Join(args[1], "mapped")); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "rank 1 fails")
		os.Exit(1)
	case len(args) == 3 && args[0] == "rank":
		return rank0(args[1], shm+args[2])
	}
	return fmt.Errorf("usage: shmrank rank DIR PREFIX | shmrank hold PATH")
}

func rank0(dir, prefix string) error {
	for _, f := range []string{"-own", "-other", "-link"} {
		if _, err := mapFile(prefix+f, false); err != nil {
			return err
		}
	}
	if _, err := mapFile(prefix+"-seg", true); err != nil {
		return err
	}
	if err := os.Mkdir(prefix+"-dir", 0o700); err != nil {
		return err
	}
	if _, err := mapFile(prefix+"-dir/seg", true); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "started"), nil, 0o600); err != nil {
		return err
	}
	if err := waitFor(prefix + "-job2"); err != nil {
		return err
	}
	if _, err := mapFile(prefix+"-job2", false); err != nil {
		return err
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, unix.SIGTERM)
	if err := os.WriteFile(filepath.Join(dir, "mapped"), nil, 0o600); err != nil {
		return err
	}
	<-term
	if err := os.Rename(prefix+"-dir", prefix+"-dir.moved"); err != nil {
		return err
	}
	if err := os.Symlink(filepath.Join(dir, "keep"), prefix+"-dir"); err != nil {
		return err
	}
	os.Exit(143)
	return nil
}

// mapFile maps a page of path shared, making the file when create is set,
// and leaves it mapped.
func mapFile(path string, create bool) ([]byte, error) {
	flag, prot := os.O_RDONLY, unix.PROT_READ
	if create {
		flag, prot = os.O_RDWR|os.O_CREATE|os.O_EXCL, unix.PROT_READ|unix.PROT_WRITE
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if create {
		if err := f.Truncate(int64(os.Getpagesize())); err != nil {
			return nil, err
		}
	}
	m, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return m, nil
}

// waitFor waits until path exists, for half a minute at most.
func waitFor(path string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Lstat(path); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s did not appear", path)
}
