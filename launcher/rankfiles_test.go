package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
)

// torchrun's --redirects and --tee, per local rank or for all.
func TestParseStd(t *testing.T) {
	for in, want := range map[string]map[int]uint8{"0": {-1: 0}, "3": {-1: 3}, "0:1,2:3": {-1: 0, 0: 1, 2: 3}} {
		if got, err := ParseStd("--tee", in); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseStd(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"4", "x", "0:", "a:1", "-1:1", ""} {
		if _, err := ParseStd("--tee", in); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--tee") {
			t.Errorf("ParseStd(%q): %v", in, err)
		}
	}
}

// torchrun's layout: LOG_DIR/RUN_XXXXXXXX/attempt_N/LOCAL_RANK/; a
// redirected stream goes to its file only, a tee'd one to gorun's output
// too; the filter hides the other local ranks' output.
func TestTorchLogs(t *testing.T) {
	f, err := TorchLogs("/logs", "job7", "0:3", "1", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Dir, "/logs/job7_") || len(f.Dir) != len("/logs/job7_")+8 {
		t.Errorf("Dir %q", f.Dir)
	}
	r0 := f.forRank(4, 0, 1, "h", 2)
	if r0.Stdout != f.Dir+"/attempt_2/0/stdout.log" || r0.Stderr != f.Dir+"/attempt_2/0/stderr.log" || r0.Quiet != 2 {
		t.Errorf("local rank 0: %+v", r0)
	}
	r1 := f.forRank(5, 1, 1, "h", 2) // --tee 1 for the others
	if r1.Stdout != f.Dir+"/attempt_2/1/stdout.log" || r1.Stderr != "" || r1.Quiet != 0 {
		t.Errorf("local rank 1: %+v", r1)
	}
	f, err = TorchLogs("", "", "", "", "1")
	if err != nil || f.Dir != "" || f.forRank(0, 0, 0, "h", 0).Quiet != 3 || f.forRank(1, 1, 0, "h", 0) != nil {
		t.Errorf("--local-ranks-filter 1 alone: %+v, %v", f, err)
	}
	if f, err := TorchLogs("", "", "3", "", ""); err != nil || !strings.HasPrefix(f.Dir, filepath.Join(os.TempDir(), "torchelastic_")) {
		t.Errorf("--redirects without --log-dir: %+v, %v", f, err)
	}
	if f, err := TorchLogs("", "", "", "", ""); f != nil || err != nil {
		t.Errorf("nothing asked: %+v, %v", f, err)
	}
	if _, err := TorchLogs("", "", "", "", "x"); !errors.Is(err, ErrUsage) {
		t.Errorf("a bad filter: %v", err)
	}
}

// Hydra's patterns: %r rank, %h host, %p node, %g 0; the files replace
// gorun's output.
func TestHydraFiles(t *testing.T) {
	f, err := HydraFiles("o.%r.%h.%p.%g.%%", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.forRank(3, 1, 2, "h2", 0); !reflect.DeepEqual(got, &control.RankFiles{Stdout: "o.3.h2.2.0.%", Quiet: 1}) {
		t.Errorf("forRank: %+v", got)
	}
	for _, p := range []string{"o.%", "o.%x"} {
		if _, err := HydraFiles(p, ""); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--outfile-pattern") {
			t.Errorf("HydraFiles(%q): %v", p, err)
		}
	}
	if f, err := HydraFiles("", ""); f != nil || err != nil {
		t.Errorf("no patterns: %+v, %v", f, err)
	}
}

// The agent's side: the files are made with their directories, a
// stream's bytes go to its file, and gorun's output gets those not quiet.
func TestRankOutput(t *testing.T) {
	dir := t.TempDir()
	o, err := openRankFiles(&control.RankFiles{Stdout: filepath.Join("a", "0", "stdout.log"), Quiet: 1}, dir) // relative: in dir
	if err != nil {
		t.Fatal(err)
	}
	if o.write(output.Stdout, []byte("x\n")) || !o.write(output.Stderr, []byte("y\n")) {
		t.Error("stdout is relayed, or stderr is not")
	}
	o.closeStream(output.Stdout)
	o.close()
	if b, err := os.ReadFile(filepath.Join(dir, "a", "0", "stdout.log")); err != nil || string(b) != "x\n" {
		t.Errorf("the file holds %q, %v", b, err)
	}
	var none *rankOutput
	if !none.write(output.Stdout, []byte("x")) {
		t.Error("a rank without files is not relayed")
	}
	none.close()
	if _, err := openRankFiles(&control.RankFiles{Stderr: filepath.Join(dir, "a", "0", "stdout.log", "x")}, "/"); err == nil {
		t.Error("a file under a file was made")
	}
}
