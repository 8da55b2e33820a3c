package launcher

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/output"
)

// --output-filename as each personality reads it: Open MPI's mpirun
// prints a copy on the terminal and takes :nocopy and :nojobid; gorun's
// own (and the other personalities') writes files only, and a colon is
// part of the directory's name.
func TestParseOutputDir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l       env.Launcher
		v       string
		want    outputDir
		wantErr string
	}{
		{env.Gorun, "out", outputDir{dir: "out"}, ""},
		{env.Gorun, "out:nocopy", outputDir{dir: "out:nocopy"}, ""},
		{env.MPIExec, "out", outputDir{dir: "out"}, ""},
		{env.TorchRun, "out", outputDir{dir: "out"}, ""},
		{env.MPIRun, "out", outputDir{dir: "out", tee: true}, ""},
		{env.MPIRun, "/tmp/o:nocopy", outputDir{dir: "/tmp/o"}, ""},
		{env.MPIRun, "/tmp/o:nojobid", outputDir{dir: "/tmp/o", tee: true, flat: true}, ""},
		{env.MPIRun, "/tmp/o:nojobid,NOCOPY", outputDir{dir: "/tmp/o", flat: true}, ""},
		{env.MPIRun, "/tmp/o:bogus", outputDir{}, `unknown directive "bogus": Open MPI's are nocopy`},
		{env.MPIRun, ":nocopy", outputDir{}, "no directory before the colon"},
	}
	for _, tt := range tests {
		got, err := parseOutputDir(tt.l, tt.v)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrUsage) {
				t.Errorf("%q under %q: %v, want a usage error with %q", tt.v, tt.l, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q under %q = %+v, %v; want %+v", tt.v, tt.l, got, err, tt.want)
		}
	}
}

// Each personality's tags and timestamps: Open MPI's under gorun mpirun,
// and a tag without the host under mpirun and mpiexec (Hydra's
// -prepend-rank prints "[rank] " on any number of hosts).
func TestOutputFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l       env.Launcher
		nodes   int
		style   output.Style
		tagHost bool
	}{
		{env.Gorun, 1, output.StyleGorun, false},
		{env.Gorun, 2, output.StyleGorun, true},
		{env.TorchRun, 2, output.StyleGorun, true},
		{env.MPIRun, 2, output.StyleOpenMPI, false},
		{env.MPIExec, 2, output.StyleGorun, false},
		{env.HorovodRun, 2, output.StyleOpenMPI, false}, // horovodrun runs mpirun --tag-output
	}
	for _, tt := range tests {
		o := outputFormat(tt.l, true, true, false, 0, tt.nodes)
		if o.Style != tt.style || o.TagHost != tt.tagHost || !o.Tag || !o.Timestamp {
			t.Errorf("%q on %d hosts: style %v, tag host %v; want %v, %v", tt.l, tt.nodes, o.Style, o.TagHost, tt.style, tt.tagHost)
		}
	}
}
