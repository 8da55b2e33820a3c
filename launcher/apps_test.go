package launcher

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
)

// ParseApps reads "prog1 : -np 2 prog2" as app contexts: the first on
// gorun's -np, each later one with its own -np, -x and --wdir.
func TestParseApps(t *testing.T) {
	abs, _ := filepath.Abs("d")
	tests := []struct {
		argv []string
		np   int
		want []App
		err  string
	}{
		{argv: []string{"prog", "a", "b"}, np: 2},
		{argv: []string{"a", "-v", ":", "-np", "2", "b", "-np", "9"}, np: 1,
			want: []App{{Argv: []string{"a", "-v"}, NP: 1}, {Argv: []string{"b", "-np", "9"}, NP: 2}}},
		{argv: []string{"a", ":", "--n=3", "-x", "A=1", "--x", "B", "-wdir", "d", "b", ":", "-n", "1", "--", "-c"}, np: 2,
			want: []App{{Argv: []string{"a"}, NP: 2},
				{Argv: []string{"b"}, NP: 3, Exports: []env.Export{{Name: "A", Value: "1", HasValue: true}, {Name: "B"}}, Dir: abs},
				{Argv: []string{"-c"}, NP: 1}}},
		{argv: []string{"a", ":", "-np", "2", "b"}, err: "a (program 1 of the job): give its number of ranks (gorun's -np N before it)"},
		{argv: []string{"a", ":", "b"}, np: 1, err: "b (program 2 of the job): give its number of ranks (': -np N b')"},
		{argv: []string{"a", ":"}, np: 1, err: "program 2 of the job (after ':' number 1): no program"},
		{argv: []string{":", "-np", "1", "b"}, np: 1, err: "program 1 of the job (after ':' number 0): no program"},
		{argv: []string{"a", ":", "-np", "0", "b"}, np: 1, err: "-np 0 after ':' (program 2 of the job): want a number of ranks from 1"},
		{argv: []string{"a", ":", "-np"}, np: 1, err: "-np after ':' (program 2 of the job): takes a value"},
		{argv: []string{"a", ":", "--bind-to", "core", "b"}, np: 1, err: "--bind-to after ':' (program 2 of the job): a program after ':' takes only -np N, -x NAME[=VALUE] and --wdir DIR; give the job's options before the first program"},
		{argv: []string{"a", ":", "-np", "1", "-x", "1A", "b"}, np: 1, err: `bad -x export "1A"`},
	}
	for _, tt := range tests {
		got, err := ParseApps(tt.argv, tt.np)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrUsage) {
				t.Errorf("ParseApps(%q, %d): %v, want %q", tt.argv, tt.np, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseApps(%q, %d) = %+v, %v; want %+v", tt.argv, tt.np, got, err, tt.want)
		}
	}
}

// A job's apps number their ranks in order, and each rank's app is found
// by its rank; setApps makes the plan's rank count theirs.
func TestAppRanks(t *testing.T) {
	apps := []App{{Argv: []string{"a"}, NP: 1}, {Argv: []string{"b"}, NP: 3, Exports: []env.Export{{Name: "A", Value: "1", HasValue: true}}}, {Argv: []string{"c"}, NP: 2}}
	o := Options{Apps: apps, Plan: PlanOptions{NP: 1}}
	if err := o.setApps(); err != nil || o.Plan.NP != 6 {
		t.Fatalf("setApps: NP %d, %v; want 6", o.Plan.NP, err)
	}
	if got := strings.Join(o.Argv, " "); got != "a : -np 3 -x A=1 b : -np 2 c" {
		t.Errorf("Argv %q", got)
	}
	l := launchApps(apps, func(int, string) { t.Error("an export is missing") })
	if l[1].First != 1 || l[1].Size != 3 || l[2].First != 4 || !reflect.DeepEqual(l[1].Exports, []string{"A=1"}) {
		t.Errorf("launchApps: %+v", l)
	}
	for rank, want := range []int{0, 1, 1, 1, 2, 2} {
		if got := appIndex(l, rank); got != want {
			t.Errorf("appIndex(%d) = %d, want %d", rank, got, want)
		}
	}
	if got := appNumbers(l, 6); !reflect.DeepEqual(got, []int{0, 1, 1, 1, 2, 2}) {
		t.Errorf("appNumbers: %v", got)
	}
	if appNumbers(nil, 6) != nil {
		t.Error("appNumbers without apps is not nil")
	}
	if appIndex(nil, 5) != 0 {
		t.Error("appIndex without apps is not 0")
	}
	for _, bad := range []Options{
		{Apps: apps, Plan: PlanOptions{NP: 4}},
		{Apps: apps, PerNode: &PerNode{}},
		{Apps: []App{{Argv: []string{"a"}, NP: 0}}},
		{Apps: []App{{Argv: []string{"a"}, NP: 1, Dir: "rel"}}},
	} {
		if err := bad.setApps(); !errors.Is(err, ErrUsage) {
			t.Errorf("setApps(%+v): %v, want a usage error", bad, err)
		}
	}
	// The agent's view: rank 2 runs b, in its own directory, with the
	// job's exports and then its own.
	lch := control.Launch{Argv: []string{"x"}, Dir: "/job", Exports: []string{"J=1"}, Apps: l,
		Ranks: []control.RankSpec{{Rank: 2, App: 1}, {Rank: 5, App: 2}}}
	p := &launchPlan{l: lch}
	if a := p.app(0); a.Argv[0] != "b" || a.Dir != "/job" {
		t.Errorf("rank 2's app: %+v", a)
	}
	if got := p.exports(0); !reflect.DeepEqual(got, []string{"J=1", "A=1"}) {
		t.Errorf("rank 2's exports: %q", got)
	}
	if got := p.exports(1); !reflect.DeepEqual(got, []string{"J=1"}) {
		t.Errorf("rank 5's exports: %q", got)
	}
	if a := launchApp(control.Launch{Argv: []string{"x"}, Dir: "/job"}, 0); a.Argv[0] != "x" || a.Dir != "/job" {
		t.Errorf("one program: %+v", a)
	}
}
