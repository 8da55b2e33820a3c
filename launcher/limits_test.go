package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
)

// The agent reports the soft limit it runs with, which Go raised to the
// hard one as it started.
func TestOpenFileLimit(t *testing.T) {
	t.Parallel()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	got := openFileLimit()
	if uint64(got) != lim.Cur || lim.Cur+1 < lim.Max {
		t.Fatalf("openFileLimit() = %d with RLIMIT_NOFILE %d/%d: want the soft limit, raised to the hard one (less one, as Go raises it)", got, lim.Cur, lim.Max)
	}
}

func TestCheckFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		hosts  []hostfile.Host
		np     int
		stdin  int   // rank that reads stdin, -1 none
		limits []int // MaxFiles of each host's agent, in node order
		want   []string
	}{
		{name: "fits", hosts: hosts("a", 8, "b", 8), np: 16, stdin: 0, limits: []int{1024, 1024}},
		{name: "exactly fits", hosts: hosts("a", 10), np: 10, stdin: 0, limits: []int{filesAgent + 10*filesPerRank + filesStdin}},
		{name: "one over", hosts: hosts("a", 10), np: 10, stdin: 0, limits: []int{filesAgent + 10*filesPerRank},
			want: []string{"a: 10 ranks need 105 open files in gorun's agent there, more than its limit of 104 (ulimit -n); at most 9 ranks fit", "ulimit -Hn"}},
		{name: "stdin elsewhere", hosts: hosts("a", 10, "b", 1), np: 11, stdin: 10, limits: []int{filesAgent + 10*filesPerRank, 1024}},
		{name: "older agent says nothing", hosts: hosts("a", 10), np: 10, stdin: 0, limits: []int{0}},
		{name: "each host named", hosts: hosts("a", 100, "b", 100, "c", 1), np: 201, stdin: -1, limits: []int{100, 1024, 60},
			want: []string{"a: 100 ranks need 464 open files", "at most 9 ranks fit", "c: 1 rank needs 68 open files", "at most 0 ranks fit"}},
		{name: "many hosts", hosts: hosts("a", 10, "b", 10, "c", 10, "d", 10, "e", 10), np: 50, stdin: -1, limits: []int{1, 1, 1, 1, 1},
			want: []string{"a: ", "c: ", "and 2 more hosts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan, err := NewPlan(tt.hosts, PlanOptions{NP: tt.np})
			if err != nil {
				t.Fatal(err)
			}
			h := &head{plan: plan, o: Options{StdinRank: tt.stdin}}
			for _, l := range tt.limits {
				h.agents = append(h.agents, &agentConn{hello: control.Hello{MaxFiles: l}})
			}
			err = h.checkFiles()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("checkFiles = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("checkFiles passed, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("checkFiles = %v\nwant it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "d: ") {
				t.Errorf("checkFiles names more than three hosts: %v", err)
			}
		})
	}
}

func TestBadInterpreter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("interp", "#!/bin/sh\n", 0o755)
	write("data", "x", 0o644)
	tests := []struct {
		name, head string
		code       int
		msg        string
	}{
		{"no script", "\x7fELF...", 0, ""},
		{"empty", "", 0, ""},
		{"just #!", "#!\n", 0, ""},
		{"fine", "#!/bin/sh\necho\n", 0, ""},
		{"fine with an argument", "#! /bin/sh -e\n", 0, ""},
		{"relative to the working directory", "#!interp\n", 0, ""},
		{"missing", "#!/nonexistent/sh -x\n", ExitNotFound, "bad interpreter: /nonexistent/sh: no such file"},
		{"missing, tab", "#!\t/nonexistent/sh\t-x", ExitNotFound, "bad interpreter: /nonexistent/sh: no such file"},
		{"CRLF", "#!/bin/sh\r\necho\r\n", ExitNotFound, `bad interpreter: "/bin/sh\r": no such file`},
		{"missing, relative", "#!./nope\n", ExitNotFound, "bad interpreter: ./nope: no such file"},
		{"not executable", "#!data\n", ExitNotExec, "bad interpreter: data: permission denied"},
		{"a directory", "#!/\n", ExitNotExec, "bad interpreter: /: permission denied"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := filepath.Join(dir, "script"+string(rune('a'+i)))
			if err := os.WriteFile(name, []byte(tt.head), 0o755); err != nil {
				t.Fatal(err)
			}
			code, msg := badInterpreter(name, dir)
			if code != tt.code || msg != tt.msg {
				t.Fatalf("badInterpreter(%q) = %d, %q; want %d, %q", tt.head, code, msg, tt.code, tt.msg)
			}
		})
	}
}

// Without a launch tree the head holds a connection per host: past its
// descriptor limit it says so before starting any agent, and how to fix
// it; with the tree it holds K.
func TestCheckHeadFiles(t *testing.T) {
	tests := []struct {
		hosts, direct, limit int
		ok                   bool
	}{
		{4, 4, 1024, true},
		{4096, 4096, 1024, false},
		{4096, 32, 1024, true}, // the tree
		{320, 320, 1024, true}, // 64 + 3 x 320 = 1024
		{321, 321, 1024, false},
		{100000, 100000, 0, true}, // the limit unknown: not checked
	}
	for _, tt := range tests {
		err := checkHeadFiles(tt.hosts, tt.direct, tt.limit)
		if tt.ok != (err == nil) {
			t.Errorf("%d hosts, %d direct, limit %d: %v", tt.hosts, tt.direct, tt.limit, err)
			continue
		}
		if err != nil {
			for _, w := range []string{fmt.Sprintf("%d hosts", tt.hosts), "limit of 1024", "--launch-fanout auto", "ulimit -n"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not say %q", err, w)
				}
			}
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%v is not a usage error", err)
			}
		}
	}
}
