package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildMPIHello builds examples/mpi/hello.c with Debian's MPICH into dir.
func buildMPIHello(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("mpicc.mpich"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mpicc.mpich is missing (apt-get install mpich libmpich-dev); CI must run the MPI tests")
		}
		t.Skip("mpicc.mpich is missing: apt-get install mpich libmpich-dev")
	}
	bin := filepath.Join(dir, "mpi_hello")
	if out, err := exec.Command("mpicc.mpich", "-o", bin, "../../examples/mpi/hello.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	return bin
}

// A real MPICH program runs under gorun's PMI-1 server, and MPI_Abort and
// an early exit end the job with the right code and a named rank.
func TestMPICH(t *testing.T) {
	t.Parallel()
	bin := buildMPIHello(t, t.TempDir())
	r := runGorun(t, 60*time.Second, nil, "-np", "4", bin)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for rank := range 4 {
		if w := "rank " + itoa(rank) + " of 4 sum 6\n"; !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"abort", "2"}, 7, "rank 2 on localhost called MPI_Abort(7)"},
		{[]string{"early", "1"}, 1, "rank 1 on localhost left before MPI_Finalize"},
	} {
		mark := newMark(t)
		r := runGorun(t, 60*time.Second, nil, append([]string{"-np", "4", "-x", "GORUN_TEST_MARK=" + mark, bin}, tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v: exit %d (want %d)\n%s", tt.args, r.code, tt.code, r.stderr)
		}
		if r.elapsed > 10*time.Second {
			t.Errorf("%v: took %v", tt.args, r.elapsed)
		}
		assertNoSurvivors(t, mark, time.Second)
	}
}

// The same program across two SSH hosts: one fence message per host
// crosses the control channel. UCX is left to its own choice: the fake
// hosts share a kernel, and MPICH 4.0.2 with UCX 1.13's TCP transport
// alone hangs in MPI_Finalize now and then (seen here, in and out of gorun).
func TestSSHMPICH(t *testing.T) {
	c := sharedCluster(t)
	bin := buildMPIHello(t, binDir)
	r := runBin(t, gorunBin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1:2,h2:2", bin)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Count(r.stdout, "of 4 sum 6\n") != 4 {
		t.Errorf("stdout:\n%s", r.stdout)
	}
}
