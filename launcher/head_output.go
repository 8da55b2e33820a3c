// This file holds how the ranks' output looks under each personality:
// the formats of --tag-output, --timestamp-output and --output-filename,
// and who prints it in a per-node launch. Package output does the work.

package launcher

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
)

// outputStyle is the output formats of personality l: Open MPI's under
// gorun mpirun and gorun horovodrun, gorun's own otherwise (Hydra's -prepend-rank is gorun's
// tag without the host).
func outputStyle(l env.Launcher) output.Style {
	if l == env.MPIRun || l == env.HorovodRun { // horovodrun runs mpirun --tag-output
		return output.StyleOpenMPI
	}
	return output.StyleGorun
}

// tagsHost reports whether --tag-output names the host, on a job of
// several hosts, under personality l: gorun's own and torchrun's tags do
// ("[host:rank] "); mpirun's ("[1,rank]<stdout>:", which horovodrun's
// mpirun prints too) and Hydra's -prepend-rank ("[rank] ") name the rank
// alone.
func tagsHost(l env.Launcher) bool {
	return l != env.MPIRun && l != env.MPIExec && l != env.HorovodRun
}

// outputFormat is how ranks' lines are formatted under personality l, on
// a job of nodes hosts: the style, tags, timestamps and merging.
func outputFormat(l env.Launcher, tag, timestamp, merge bool, window time.Duration, nodes int) output.Options {
	return output.Options{Style: outputStyle(l), Tag: tag, TagHost: tag && nodes > 1 && tagsHost(l),
		Timestamp: timestamp, Merge: merge, MergeWindow: window}
}

// outputDir is --output-filename as personality l reads it.
type outputDir struct {
	dir  string // where the files go
	tee  bool   // the ranks' output is printed too
	flat bool   // Open MPI's files without the job's directory (nojobid)
}

// parseOutputDir reads --output-filename v under personality l. Open
// MPI's mpirun prints to the terminal too, and takes directives after a
// colon: DIR:nocopy (nothing on the terminal), DIR:nojobid (DIR/rank.N
// rather than DIR/1/rank.N), or both, comma-separated. gorun's own
// --output-filename writes files only.
func parseOutputDir(l env.Launcher, v string) (outputDir, error) {
	if l != env.MPIRun {
		return outputDir{dir: v}, nil
	}
	d := outputDir{dir: v, tee: true}
	dir, directives, ok := strings.Cut(v, ":")
	if !ok {
		return d, nil
	}
	d.dir = dir
	for _, x := range strings.Split(directives, ",") {
		switch strings.ToLower(x) {
		case "nocopy":
			d.tee = false
		case "nojobid":
			d.flat = true
		default:
			return d, fmt.Errorf("%w: --output-filename %s: unknown directive %q: Open MPI's are nocopy (no copy on the terminal) and nojobid (DIR/rank.N)", ErrUsage, v, x)
		}
	}
	if dir == "" {
		return d, fmt.Errorf("%w: --output-filename %s: no directory before the colon", ErrUsage, v)
	}
	return d, nil
}

// openOutput makes the multiplexer that the ranks' output goes through.
// In a per-node launch each node's agent prints its own ranks' output
// (control.Print), so the head prints none: its multiplexer writes only
// --output-filename's files, and gorun's own messages.
func (h *head) openOutput() error {
	o := h.o
	d, err := parseOutputDir(o.Personality, o.OutputDir)
	if err != nil {
		return err
	}
	mo := outputFormat(o.Personality, o.Tag, o.Timestamp, o.MergeOutput, o.MergeWindow, len(h.plan.Nodes))
	mo.Stdout, mo.Stderr, mo.SameTerminal = o.Stdout, o.Stderr, sameFile(o.Stdout, o.Stderr)
	mo.Host = h.hostOf
	mo.Label = h.label
	mo.Dir, mo.Tee, mo.FlatDir = d.dir, d.tee && !o.nodeOutput, d.flat
	mo.Ranks = len(h.plan.Ranks)
	if o.Plan.MapBy.NeedsNUMA() {
		mo.Ranks = 0 // not known before the agents report their NUMA nodes (replan)
	}
	mux, err := output.New(mo)
	if err != nil {
		return fmt.Errorf("%w: --output-filename: %w", ErrUsage, err)
	}
	h.mux = mux
	return nil
}

// printsOutput reports whether the head prints the ranks' output or
// writes it to files: not in a per-node launch without
// --output-filename, where the nodes print it.
func (h *head) printsOutput() bool { return !h.o.nodeOutput || h.o.OutputDir != "" }

// printFor is what an agent's Launch says of printing its ranks' output
// itself: in a per-node launch, each node prints its own ranks' (as each
// node's torchrun prints its workers'), so every pod's log has them.
func (h *head) printFor() *control.Print {
	if !h.o.nodeOutput {
		return nil
	}
	return &control.Print{Tag: h.o.Tag, Timestamp: h.o.Timestamp, Merge: h.o.MergeOutput, MergeWindow: h.o.MergeWindow}
}

// output writes a rank's output. A rank's --output-filename file failing
// loses its output, which stops the job; gorun's own stdout failing
// (EPIPE) must not.
func (h *head) output(a *agentConn, f control.Frame) {
	out, err := f.Output()
	if err == nil && out.Rank >= 0 && out.Rank < len(h.live) {
		h.live[out.Rank].lastOut.Store(time.Now().UnixNano())
	}
	if err == nil && h.printsOutput() {
		err = h.mux.Write(out.Rank, output.Stream(out.Stream), out.Time, out.Data)
	}
	if fe, ok := errors.AsType[*output.FileError](err); ok {
		// A rank's file (Write names it, once): its output is lost.
		h.events <- outputLost{fromAgent{a.node}, fmt.Sprintf("rank %d's %s is lost: %v (--output-filename)",
			out.Rank, output.Stream(out.Stream), fe.Err)}
	}
}
