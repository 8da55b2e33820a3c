package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWantsEarlyAgent(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"gorun", "-np", "4", "./train"}, true},
		{[]string{"gorun", "./train"}, true},
		{[]string{"gorun", "--np=4", "-H", "h1,h2", "python3", "x.py"}, true},
		{[]string{"gorun", "-np", "2", "--", "prog"}, true},
		{[]string{"gorun", "-x", "A=1", "--tag-output", "prog"}, true},
		{[]string{"gorun", "mpirun", "-np", "2", "prog"}, true}, // a personality runs a job
		{[]string{"gorun", "-np", "2", "check"}, false},         // a subcommand after the job's flags
		{[]string{"gorun", "-H", "h1,h2", "check", "--net"}, false},
		{[]string{"gorun", "ps"}, false},
		{[]string{"gorun", "agent", "--host", "h1"}, false},
		{[]string{"gorun", "help"}, false},
		{[]string{"gorun", "--version"}, false},
		{[]string{"gorun", "-h"}, false},
		{[]string{"gorun", "--dry-run", "-np", "4", "prog"}, false},
		{[]string{"gorun", "-np", "4"}, false}, // no program: a usage error
		{[]string{"gorun"}, false},
		{[]string{"gorun", "--"}, false},
	}
	for _, tt := range tests {
		if got := wantsEarlyAgent(tt.args); got != tt.want {
			t.Errorf("wantsEarlyAgent(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// commands names every subcommand of the app, and nothing else: a new
// subcommand missing from it would start an early agent for nothing.
func TestCommandsKnown(t *testing.T) {
	app := newApp(os.Stdout, os.Stderr)
	var names []string
	for _, c := range app.Commands {
		names = append(names, c.Name)
		names = append(names, c.Aliases...)
	}
	names = append(names, "help", "h") // urfave/cli's own
	var known []string
	for n := range commands {
		known = append(known, n)
	}
	slices.Sort(names)
	slices.Sort(known)
	if !slices.Equal(names, known) {
		t.Fatalf("commands = %v, the app's commands are %v", known, names)
	}
}

// A job's local agent is the one main started before reading the flags
// (its command line names no host), it takes the plan's name for the
// host from the head's hello, and one that no host took is ended with
// nothing left behind: no process, no directory.
func TestEarlyAgent(t *testing.T) {
	t.Parallel()
	mark := newMark(t)
	tmp := t.TempDir()
	rec := filepath.Join(t.TempDir(), "rec")
	environ := []string{"GORUN_TEST_MARK=" + mark, "TMPDIR=" + tmp}
	r := runGorunIn(t, "", environ, 30*time.Second, nil, "-np", "1", "--record", rec,
		"sh", "-c", `tr '\0' ' ' < /proc/$PPID/cmdline`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	args := strings.Fields(r.stdout)
	if !slices.Contains(args, "agent") || slices.Contains(args, "--host") {
		t.Fatalf("the rank's parent is %q, want the early agent (gorun agent, no --host)", r.stdout)
	}
	b, err := os.ReadFile(filepath.Join(rec, "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	var record struct {
		Hosts []struct {
			Host string `json:"host"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(b, &record); err != nil {
		t.Fatal(err)
	}
	if len(record.Hosts) != 1 || record.Hosts[0].Host != "localhost" {
		t.Fatalf("the record's hosts are %+v, want the plan's name, localhost", record.Hosts)
	}
	assertNoSurvivors(t, mark, 2*time.Second)

	// Refused after main started the agent: it goes, unused.
	r = runGorunIn(t, "", environ, 30*time.Second, nil, "-np", "1", "--bind-to", "nosuch", "true")
	if r.code != 2 {
		t.Fatalf("--bind-to nosuch: exit %d, want 2\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "agent") {
		t.Errorf("the unused agent said something:\n%s", r.stderr)
	}
	assertNoSurvivors(t, mark, 2*time.Second)
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Fatalf("left in TMPDIR: %v", left)
	}
}
