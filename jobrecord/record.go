// Package jobrecord is the record of one job that gorun --record keeps,
// for the question "why did my job fail?": the plan, each host's gorun,
// kernel, driver, MPI and Python versions, the bindings, each host's
// environment as it differs from the head's (secrets redacted), the
// times of the launch's phases, every rank's exit and its cause, and the
// hang verdict when there was one. gorun show prints it.
//
// The package holds the record's types, what a host reports about itself
// ([Gather], run by each agent), the redaction of secrets from
// environments ([Redact]) and from command lines ([RedactArgs]), the
// difference of two environments ([Diff]), what differs between hosts
// ([FindSkew]: versions, MTUs, the variables that steer NCCL, UCX and
// MPI), and the record's file ([Record.Write], [Read]) and text
// ([Record.Format]). The head fills the record; jobrecord starts,
// watches and asks nothing.
package jobrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gorun/gorun/internal/atomicfile"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FormatVersion is the version of the record's JSON form that this gorun
// writes; [Read] refuses a record of a later one.
const FormatVersion = 1

// The files that [Record.Write] writes into a record's directory.
const (
	JSONFile = "record.json" // the record, for gorun show and for tools
	TextFile = "record.txt"  // what gorun show -v prints, for a reader without gorun
)

// Record is everything gorun keeps about one job.
type Record struct {
	// Version is the version of the record's form, FormatVersion when
	// this gorun wrote it.
	Version int `json:"format"`
	// JobID is the job's id, as gorun's messages name it.
	JobID string `json:"job_id"`
	// Argv is gorun's own command line (os.Args), the program's included,
	// with its secrets redacted (see [RedactArgs]) when written and read.
	Argv []string `json:"argv"`
	// ConfigFiles are the configuration files that gorun read for the
	// job's settings (gorun config lists them too), lowest precedence
	// first.
	ConfigFiles []string `json:"config_files,omitempty"`
	// Start and End bound the job, from gorun's start to its end.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// GorunVersion is the head's gorun version.
	GorunVersion string `json:"gorun_version"`
	// HeadHost is the name of the host the head ran on.
	HeadHost string `json:"head_host"`
	// Head describes the head's host; its Env is what the hosts'
	// EnvDiff compare with (see [Record.DiffEnv]).
	Head *HostInfo `json:"head,omitempty"`
	// Plan is where each rank ran.
	Plan Plan `json:"plan"`
	// Hosts describes each host of the plan, in node-rank order.
	Hosts []HostInfo `json:"hosts,omitempty"`
	// Bindings are the ranks' CPU, memory and GPU bindings.
	Bindings []Binding `json:"bindings,omitempty"`
	// Phases are the launch's phases in order: connect, stage, launch,
	// first-fence, end.
	Phases []Phase `json:"phases,omitempty"`
	// Ranks says how each rank ended, by rank.
	Ranks []RankEnd `json:"ranks,omitempty"`
	// FirstFailure is the rank whose failure ended the job, if one did.
	FirstFailure *Failure `json:"first_failure,omitempty"`
	// Reason is why the job ended, as --summary-json's reason: success,
	// rank-failed, timeout, signal, agent-lost, output-lost, cancelled.
	Reason string `json:"reason"`
	// Message says it in words where Reason and FirstFailure do not
	// ("the agent on node3 was lost: ...").
	Message string `json:"message,omitempty"`
	// ExitCode is gorun's exit status.
	ExitCode int `json:"exit_code"`
	// Hang is the hang verdict, as JSON of the shape
	// {"groups":[{"ranks":[..],"hosts":[..],"summary":"..."}],"odd":[..]},
	// when gorun judged the job hung; kept raw so that this package need
	// not know the stacks package.
	Hang json.RawMessage `json:"hang,omitempty"`
	// Summary is the --summary-json record, when the head adds it; its
	// "argv" is redacted as Argv is.
	Summary json.RawMessage `json:"summary,omitempty"`
}

// Plan is the job's plan: as --display-map prints it, and rank by rank.
type Plan struct {
	// Text is the plan as the launcher's Plan.Format prints it, one
	// line an element, without newlines.
	Text []string `json:"text,omitempty"`
	// Ranks is each rank's place, by rank.
	Ranks []RankPlace `json:"ranks,omitempty"`
}

// RankPlace is where one rank ran.
type RankPlace struct {
	Rank      int    `json:"rank"`
	Host      string `json:"host"`
	LocalRank int    `json:"local_rank"`
	NodeRank  int    `json:"node_rank"`
}

// Binding is one rank's binding, as --report-bindings prints it.
type Binding struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	CPUs string `json:"cpus,omitempty"` // a CPU list, as 0-3,8
	Mems string `json:"mems,omitempty"` // NUMA nodes
	GPUs string `json:"gpus,omitempty"` // the GPUs the rank was given
	Note string `json:"note,omitempty"` // why, or why not bound
}

// Phase is one phase of the job: connect, stage, launch, first-fence or
// end.
type Phase struct {
	Name     string        `json:"name"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration_ns"`
}

// RankEnd is how one rank ended.
type RankEnd struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	PID  int    `json:"pid,omitempty"`
	// Exit is the rank's exit code; -1 when a signal killed it or it
	// never ended.
	Exit int `json:"exit"`
	// Signal is the signal that killed it ("SIGKILL"), if one did.
	Signal string `json:"signal,omitempty"`
	// Cause says how it ended, in words: "exited 0", "exited 3",
	// "killed by SIGKILL (OOM killer)", "stopped by gorun after rank 2
	// failed", "could not start: ...".
	Cause    string `json:"cause"`
	Restarts int    `json:"restarts,omitempty"`
	// LastLines are the last lines of its stderr.
	LastLines []string `json:"last_lines,omitempty"`
}

// OK reports whether the rank ended well: exit code 0, no signal, and no
// other cause.
func (e RankEnd) OK() bool {
	return e.Exit == 0 && e.Signal == "" && (e.Cause == "" || e.Cause == "exited 0")
}

// Failure names the first rank to fail.
type Failure struct {
	Rank  int    `json:"rank"`
	Host  string `json:"host"`
	Cause string `json:"cause"`
}

// DiffEnv fills each host's EnvDiff with its environment's difference
// from the head's (r.Head.Env), and then drops the host's Env: the head's
// environment and the difference say it all but the variables that [Diff]
// ignores. Without r.Head it does nothing.
func (r *Record) DiffEnv() {
	if r.Head == nil {
		return
	}
	for i := range r.Hosts {
		h := &r.Hosts[i]
		if h.Env == nil {
			continue
		}
		d := Diff(r.Head.Env, h.Env)
		h.EnvDiff, h.Env = &d, nil
	}
}

// Write writes the record into dir: record.json (mode 0600), with Version
// set to FormatVersion where it is 0, and record.txt (mode 0600), what
// [Record.Format] prints verbosely. Both hold the command lines (Argv,
// and the argv of Summary) redacted by [RedactArgs], whatever r holds; r
// itself is not changed. It creates dir (mode
// 0700) if it does not exist, and replaces each file whole (a temporary
// file renamed over it), so that a reader never sees half a record.
func (r *Record) Write(dir string) error {
	c := *r
	if c.Version == 0 {
		c.Version = FormatVersion
	}
	c.redact()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("job record: %w", err)
	}
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return fmt.Errorf("job record %s: %w", filepath.Join(dir, JSONFile), err)
	}
	if err := writeFile(filepath.Join(dir, JSONFile), append(b, '\n')); err != nil {
		return err
	}
	var text strings.Builder
	c.Format(&text, true)
	return writeFile(filepath.Join(dir, TextFile), []byte(text.String()))
}

// writeFile writes b to path (mode 0600) through a temporary file in the
// same directory, renamed over path once written and synced.
func writeFile(path string, b []byte) error {
	if err := atomicfile.Write(path, b, atomicfile.Options{Sync: true}); err != nil {
		return fmt.Errorf("job record %s: %w", path, err)
	}
	return nil
}

// Read reads the record that [Record.Write] wrote into dir; dir may also
// name the record.json file itself. Its command lines come back redacted
// as Write redacts them, even from a record that an older gorun wrote
// with them in clear. Its errors name the file, and for JSON that does
// not parse, the line and column.
func Read(dir string) (*Record, error) {
	path := dir
	if fi, err := os.Stat(dir); err != nil || fi.IsDir() {
		path = filepath.Join(dir, JSONFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("job record: %s does not exist (is %s a directory that gorun --record wrote?)", path, dir)
		}
		return nil, fmt.Errorf("job record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("job record %s: %w", where(path, b, err), err)
	}
	switch {
	case r.Version == 0:
		return nil, fmt.Errorf("job record %s: no format version: not a record that gorun --record wrote", path)
	case r.Version > FormatVersion:
		return nil, fmt.Errorf("job record %s: format %d, newer than this gorun reads (%d): read it with a newer gorun", path, r.Version, FormatVersion)
	}
	r.redact()
	return &r, nil
}

// where is path, with the line and column of the JSON error err in b
// where err says where.
func where(path string, b []byte, err error) string {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 1 || off > int64(len(b)) {
		return path
	}
	// The offset counts the bytes read: the last of them is where the
	// decoder stopped (the bad byte, or the end of a value of the wrong type).
	before := string(b[:off-1])
	line := 1 + strings.Count(before, "\n")
	col := len(before) - strings.LastIndexByte(before, '\n')
	return fmt.Sprintf("%s:%d:%d", path, line, col)
}
