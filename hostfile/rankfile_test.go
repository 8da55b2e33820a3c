package hostfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// An Open MPI rankfile: one rank a line, its host by name or by place in
// the host list (+nK), its cores as PACKAGE:CORES or CORES.
func TestParseRankfile(t *testing.T) {
	in := "# two ranks\nrank 1=b slot=1:0-1,3\n\n rank 0 = +n0 slot = * # all\nrank 2=[::1] slot=0:*\n"
	got, err := ParseRankfile(strings.NewReader(in), "rf")
	if err != nil {
		t.Fatal(err)
	}
	want := []RankSlot{
		{Rank: 0, Relative: 0, Slot: Slot{Package: -1, Text: "*"}, Line: 4},
		{Rank: 1, Host: "b", Relative: -1, Slot: Slot{Package: 1, Cores: []int{0, 1, 3}, Text: "1:0-1,3"}, Line: 2},
		{Rank: 2, Host: "::1", Relative: -1, Slot: Slot{Package: 0, Text: "0:*"}, Line: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	for _, tt := range []struct{ in, err string }{
		{"", "rf: no ranks"},
		{"rank 0=a\n", `rf:1: want "slot=SLOT" after the host in "rank 0=a"`},
		{"rank x=a slot=0\n", `rf:1: bad rank value "x"`},
		{"rank 0=a slot=0\nrank 0=b slot=1\n", "rf:2: rank 0 is placed on line 1 already"},
		{"rank 1=a slot=0\n", "rf:1: rank 1 of 1 ranks: the ranks must be 0 to 0"},
		{"rank 0=u@a slot=0\n", "a rankfile names hosts without a user"},
		{"rank 0=a slot=0:x\n", `bad core value "x"`},
		{"rank 0=a slot=3-1\n", `core value "1" out of range 3-1000000`},
		{"host a slots=2\n", `want "rank N=HOST slot=SLOT"`},
	} {
		_, err := ParseRankfile(strings.NewReader(tt.in), "rf")
		if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseRankfile(%q): %v, want %q", tt.in, err, tt.err)
		}
	}
}

// A rankfile's host must be one of the job's hosts: a typo gets the
// closest name; +nK the K-th host.
func TestRankSlotResolve(t *testing.T) {
	hosts := []Host{{Name: "h1", Slots: 1}, {Name: "h2", Slots: 1}, {Name: "gpu-node-17", Slots: 1}}
	for _, tt := range []struct {
		rs   RankSlot
		want string
	}{
		{RankSlot{Rank: 0, Host: "h2", Relative: -1}, "h2"},
		{RankSlot{Rank: 1, Relative: 2}, "gpu-node-17"},
	} {
		if got, err := tt.rs.Resolve(hosts); err != nil || got != tt.want {
			t.Errorf("Resolve(%+v) = %q, %v; want %q", tt.rs, got, err, tt.want)
		}
	}
	for _, tt := range []struct {
		rs   RankSlot
		want string
	}{
		{RankSlot{Rank: 3, Host: "hh2", Relative: -1}, "rank 3: host hh2 is not among the hosts (did you mean h2?)"},
		{RankSlot{Rank: 3, Host: "gpu-nod-17", Relative: -1}, "rank 3: host gpu-nod-17 is not among the hosts (did you mean gpu-node-17?)"},
		{RankSlot{Rank: 3, Host: "elsewhere", Relative: -1}, "rank 3: host elsewhere is not among the hosts"},
		{RankSlot{Rank: 3, Relative: 3}, "rank 3 on +n3: the host list has 3 hosts"},
	} {
		if _, err := tt.rs.Resolve(hosts); err == nil || err.Error() != tt.want {
			t.Errorf("Resolve(%+v): %v, want %q", tt.rs, err, tt.want)
		}
	}
}

// Closest suggests a host name at most two edits away, and under half of
// the name; a name of the list itself needs none.
func TestClosestHost(t *testing.T) {
	names := []string{"h1", "h2", "node01", "node02"}
	for name, want := range map[string]string{"hh2": "h2", "node1": "node01", "nod02": "node02", "h1": "", "x": "", "zzzzzz": ""} {
		if got := Closest(name, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", name, got, want)
		}
	}
}

// A filter's host that is not among the hosts gets a did-you-mean.
func TestFilterUnknownHost(t *testing.T) {
	f, err := ParseFilter("worker-1@wroker-2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Include([]Host{{Name: "worker-1", Slots: 2}, {Name: "worker-2", Slots: 2}}, f)
	var u *UnknownHostError
	if !errors.As(err, &u) || u.Suggest != "worker-2" || !strings.Contains(err.Error(), "host wroker-2 is not among the hosts (did you mean worker-2?)") {
		t.Errorf("Include: %v", err)
	}
}

// FuzzParseRankfile reads any input without a panic, and what it accepts
// places ranks 0 to N-1 once each.
func FuzzParseRankfile(f *testing.F) {
	f.Add("rank 0=a slot=0:1\nrank 1=+n1 slot=*\n")
	f.Add("rank 0 = b slot = 0-3,5 # c\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseRankfile(strings.NewReader(in), "f")
		if err != nil {
			return
		}
		for i, rs := range got {
			if rs.Rank != i || (rs.Host == "") == (rs.Relative < 0) {
				t.Fatalf("%q: line %d: %+v", in, i, rs)
			}
		}
	})
}
