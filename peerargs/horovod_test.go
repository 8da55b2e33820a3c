package peerargs

import (
	"slices"
	"strings"
	"testing"
)

// gorun horovodrun exports the launching environment to every rank, as
// horovodrun passes mpirun -x for each of its variables, leaving out what
// Horovod leaves out and what is the rank's own or gorun's.
func TestHorovodExports(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=/usr/bin", "HOME=/root", "OLDPWD=/", "PWD=/work", "SHLVL=1", "_=/usr/bin/gorun",
		"BASH_FUNC_module%%=() {}", "GORUN_RDZV_TOKEN=secret", "GORUN_NP=4", "HOROVOD_SECRET_KEY=k",
		"NCCL_DEBUG=INFO", "PATH=/again", "EMPTY=", "noequals"}
	got := strings.Join(horovodExports(environ), " ")
	if want := "-x EMPTY -x HOME -x NCCL_DEBUG -x PATH"; got != want {
		t.Errorf("horovodExports = %q, want %q", got, want)
	}
	tr, err := Translate(HorovodRun, []string{"-np", "2", "python3", "train.py"}, Options{Environ: []string{"NCCL_DEBUG=INFO", "PWD=/x"}})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(tr.Args, "NCCL_DEBUG"); i < 1 || tr.Args[i-1] != "-x" || slices.Contains(tr.Args, "PWD") {
		t.Errorf("gorun horovodrun's flags %q: want -x NCCL_DEBUG and no PWD", tr.Args)
	}
}
