package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/plugins/pmixbridge"
)

// needsPMIx tells Open MPI programs and mpi4py scripts from the rest.
func TestNeedsPMIx(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "hello.c")
	os.WriteFile(src, []byte("#include <mpi.h>\nint main(int c, char **v) { MPI_Init(&c, &v); MPI_Finalize(); return 0; }\n"), 0o644)
	type prog struct {
		path string
		argv []string
		want bool
	}
	var progs []prog
	for cc, want := range map[string]bool{"mpicc.openmpi": true, "mpicc.mpich": false} {
		if _, ok := testenv.HaveTool(t, cc, "mpich libmpich-dev openmpi-bin libopenmpi-dev"); !ok {
			continue
		}
		bin := filepath.Join(dir, strings.TrimPrefix(cc, "mpicc."))
		if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cc, err, out)
		}
		progs = append(progs, prog{bin, []string{bin}, want})
	}
	script := filepath.Join(dir, "job.py")
	os.WriteFile(script, []byte("from mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank())\n"), 0o755)
	plain := filepath.Join(dir, "plain.py")
	os.WriteFile(plain, []byte("import torch\n"), 0o755)
	shebang := filepath.Join(dir, "run")
	os.WriteFile(shebang, []byte("#!/usr/bin/python3\nimport mpi4py.MPI\n"), 0o755)
	shell := filepath.Join(dir, "run.sh")
	os.WriteFile(shell, []byte("#!/bin/sh\n# mpi4py is only mentioned\n"), 0o755)
	progs = append(progs,
		prog{"/usr/bin/python3", []string{"python3", script}, true},
		prog{"/usr/bin/python3", []string{"python3", "-u", script}, true},
		prog{"/usr/bin/python3", []string{"python3", plain}, false},
		prog{"/usr/bin/python3", []string{"python3", "-m", "mpi4py", plain}, true},
		prog{"/usr/bin/python3", []string{"python3", "-c", "import mpi4py"}, true},
		prog{shebang, []string{shebang}, true},
		prog{shell, []string{shell}, false},
		prog{"/bin/true", []string{"true"}, false},
		prog{filepath.Join(dir, "missing"), []string{"missing"}, false},
	)
	for _, p := range progs {
		if got, why := needsPMIx(p.path, p.argv, ""); got != p.want {
			t.Errorf("needsPMIx(%s, %q) = %v (%s), want %v", p.path, p.argv, got, why, p.want)
		}
	}
	// A script named relative to the ranks' directory, as a remote agent
	// (started in the ssh login's directory) sees it (migrants #46).
	if got, _ := needsPMIx("/usr/bin/python3", []string{"python3", "job.py"}, dir); !got {
		t.Errorf("needsPMIx(python3 job.py) in %s = false, want true", dir)
	}
	if got, _ := needsPMIx("/usr/bin/python3", []string{"python3", "job.py"}, t.TempDir()); got {
		t.Error("needsPMIx(python3 job.py) in a directory without it = true")
	}
}

// The agent hands the head's DynReply status to the PMIx plugin as it is
// (agent_dyn.go): the two wires' status classes must be one numbering.
func TestDynStatusesMatchPMIxBridge(t *testing.T) {
	for _, p := range [][2]int{
		{control.DynOK, pmixbridge.StatusOK},
		{control.DynError, pmixbridge.StatusError},
		{control.DynNotFound, pmixbridge.StatusNotFound},
		{control.DynNotSupported, pmixbridge.StatusNotSupported},
		{control.DynTimeout, pmixbridge.StatusTimeout},
		{control.DynExists, pmixbridge.StatusExists},
	} {
		if p[0] != p[1] {
			t.Errorf("control's status %d is pmixbridge's %d", p[0], p[1])
		}
	}
}
