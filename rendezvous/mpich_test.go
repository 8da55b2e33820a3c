package rendezvous

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

const mpiSmokeC = `#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
	int rank, size, sum = 0, one;
	const char *mode = getenv("TEST_MODE");
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mode && strcmp(mode, "abort") == 0 && rank == 1)
		MPI_Abort(MPI_COMM_WORLD, 7);
	one = rank;
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d of %d sum %d\n", rank, size, sum);
	fflush(stdout);
	MPI_Finalize();
	return 0;
}
`

// buildMPICH compiles the test program with mpicc.mpich, or skips (fails
// under CI) when MPICH is not installed.
func buildMPICH(t *testing.T) string {
	t.Helper()
	cc := testenv.NeedTool(t, "mpicc.mpich", "mpich libmpich-dev")
	dir := t.TempDir()
	src := filepath.Join(dir, "mpi_smoke.c")
	bin := filepath.Join(dir, "mpi_smoke")
	if err := os.WriteFile(src, []byte(mpiSmokeC), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	return bin
}

type rankResult struct {
	out  bytes.Buffer
	err  error
	code int
}

// runMPICH starts n ranks of bin on PMI_FD socketpairs served by one
// PMIServer over a single-host Store, and waits for them. onAbort kills all
// ranks as a launcher must.
func runMPICH(t *testing.T, bin string, n int, env []string) ([]*rankResult, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := NewStore(1, StoreOptions{FenceTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mapping, _ := ProcessMapping([]int{n})
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = i
	}
	var (
		mu     sync.Mutex
		events []string
		cmds   []*exec.Cmd
	)
	killAll := func() {
		for _, c := range cmds {
			if c.Process != nil {
				syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	srv, err := NewPMIServer(PMIConfig{
		Size: n, Ranks: ranks, KVSName: "kvs_gorun_test_0", ProcessMapping: mapping,
		Fencer: st.Member(0, 0),
		OnAbort: func(rank, code int, msg string) {
			mu.Lock()
			events = append(events, fmt.Sprintf("abort rank=%d code=%d", rank, code))
			mu.Unlock()
			killAll()
		},
		OnEarlyExit: func(rank int) {
			mu.Lock()
			events = append(events, fmt.Sprintf("early-exit rank=%d", rank))
			mu.Unlock()
		},
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	results := make([]*rankResult, n)
	var wg sync.WaitGroup
	mu.Lock() // no abort may kill while cmds grows
	for r := 0; r < n; r++ {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		mine := os.NewFile(uintptr(fds[0]), "pmi-server")
		theirs := os.NewFile(uintptr(fds[1]), "pmi-client")
		conn, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			t.Fatal(err)
		}
		res := &rankResult{}
		results[r] = res
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env, "PMI_FD=3", fmt.Sprintf("PMI_RANK=%d", r), fmt.Sprintf("PMI_SIZE=%d", n))
		cmd.ExtraFiles = []*os.File{theirs}
		cmd.Stdout = &res.out
		cmd.Stderr = &res.out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		theirs.Close()
		cmds = append(cmds, cmd)
		wg.Add(2)
		go func(r int) {
			defer wg.Done()
			if err := srv.ServeConn(ctx, conn, r); err != nil {
				t.Logf("rank %d PMI: %v", r, err)
			}
		}(r)
		go func() {
			defer wg.Done()
			res.err = cmd.Wait()
			res.code = cmd.ProcessState.ExitCode()
		}()
	}
	mu.Unlock()
	wg.Wait()
	srv.Close()
	mu.Lock()
	defer mu.Unlock()
	return results, events
}

func TestMPICHEndToEnd(t *testing.T) {
	bin := buildMPICH(t)
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			results, events := runMPICH(t, bin, n, nil)
			want := n * (n - 1) / 2
			for r, res := range results {
				line := fmt.Sprintf("rank %d of %d sum %d", r, n, want)
				if res.err != nil || !strings.Contains(res.out.String(), line) {
					t.Errorf("rank %d: %v, output %q, want %q", r, res.err, res.out.String(), line)
				}
			}
			if len(events) != 0 {
				t.Errorf("events %v", events)
			}
		})
	}
}

func TestMPICHAbort(t *testing.T) {
	bin := buildMPICH(t)
	results, events := runMPICH(t, bin, 4, []string{"TEST_MODE=abort"})
	if len(events) == 0 || events[0] != "abort rank=1 code=7" {
		t.Errorf("events %v, want the abort of rank 1 with code 7 first", events)
	}
	for r, res := range results {
		if res.err == nil {
			t.Errorf("rank %d exited 0 after the abort: %q", r, res.out.String())
		}
	}
}
