package hostfile

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Filter
	}{
		{"w0", Filter{Hosts: []FilterHost{{Name: "w0"}}}},
		{"w0@w1:0,2", Filter{Hosts: []FilterHost{{Name: "w0"}, {Name: "w1", Slots: []int{0, 2}}}}},
		{"w1:3,1", Filter{Hosts: []FilterHost{{Name: "w1", Slots: []int{3, 1}}}}},
		{"[::1]:0@10.0.0.1", Filter{Hosts: []FilterHost{{Name: "::1", Slots: []int{0}}, {Name: "10.0.0.1"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFilter(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Errorf("String() = %q, want %q", s, tt.in)
			}
		})
	}
}

func TestParseFilterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `empty filter`},
		{"w0@", `empty host`},
		{"@w0", `empty host`},
		{"w0@w0:1", `host w0 named twice`},
		{"w1:1,1", `host w1: index 1 given twice`},
		{"w1:", `host w1: bad GPU index value ""`},
		{"w1:x", `host w1: bad GPU index value "x"`},
		{"w1:-1", `host w1: bad GPU index value "-1"`},
		{"w1:0,", `host w1: bad GPU index value ""`},
		{"w1:1:2", `host w1: bad GPU index value "1:2"`},
		{"w 1", `bad host name "w 1": character ' ' not allowed`},
		{"-w", `bad host name "-w": starts with '-'`},
		{"[::1]x", `unexpected "x" after IPv6 address`},
		{"w1:99999999", `host w1: GPU index value "99999999" out of range 0-1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			f, err := ParseFilter(tt.in)
			if err == nil {
				t.Fatalf("got %v, want error", f)
			}
			want := "hostfile: filter " + strconv.Quote(tt.in) + ": " + tt.want
			if err.Error() != want {
				t.Errorf("error\n got  %s\n want %s", err, want)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
}

func TestIncludeExclude(t *testing.T) {
	t.Parallel()
	hosts := []Host{
		{Name: "w0", Slots: 4, User: "alice"},
		{Name: "w1", Slots: 4, MaxSlots: 8},
		{Name: "w2", Slots: 2},
		{Name: "w3", Slots: 4, GPUs: []int{1, 3}}, // already filtered: slots 1 and 3 left
	}
	hosts[3].Slots = 2
	tests := []struct {
		filter   string
		include  []Host
		exclude  []Host
		incErr   string
		exclErr  string
		skipExcl bool
		skipIncl bool
	}{
		{
			filter:  "w1",
			include: []Host{hosts[1]},
			exclude: []Host{hosts[0], hosts[2], hosts[3]},
		},
		{
			filter:  "w2@w0", // result keeps the hosts' order
			include: []Host{hosts[0], hosts[2]},
			exclude: []Host{hosts[1], hosts[3]},
		},
		{
			filter:  "w0@w1:0,2",
			include: []Host{hosts[0], {Name: "w1", Slots: 2, MaxSlots: 8, GPUs: []int{0, 2}}},
			exclude: []Host{{Name: "w1", Slots: 2, MaxSlots: 8, GPUs: []int{1, 3}}, hosts[2], hosts[3]},
		},
		{
			filter:  "w1:3,1",
			include: []Host{{Name: "w1", Slots: 2, MaxSlots: 8, GPUs: []int{3, 1}}},
			exclude: []Host{hosts[0], {Name: "w1", Slots: 2, MaxSlots: 8, GPUs: []int{0, 2}}, hosts[2], hosts[3]},
		},
		{
			filter:  "w2:0,1", // every slot: Exclude drops the host
			include: []Host{{Name: "w2", Slots: 2, GPUs: []int{0, 1}}},
			exclude: []Host{hosts[0], hosts[1], hosts[3]},
		},
		{
			filter:  "w3:3",
			include: []Host{{Name: "w3", Slots: 1, GPUs: []int{3}}},
			exclude: []Host{hosts[0], hosts[1], hosts[2], {Name: "w3", Slots: 1, GPUs: []int{1}}},
		},
		{
			filter:  "w9",
			incErr:  `hostfile: include "w9": host w9 is not among the hosts`,
			exclErr: `hostfile: exclude "w9": host w9 is not among the hosts`,
		},
		{
			filter:  "w0@w2:2",
			incErr:  `hostfile: include "w0@w2:2": host w2 has no slot 2 (slots 0-1)`,
			exclErr: `hostfile: exclude "w0@w2:2": host w2 has no slot 2 (slots 0-1)`,
		},
		{
			filter:  "w3:0",
			incErr:  `hostfile: include "w3:0": host w3 has no slot 0 (slots 1,3)`,
			exclErr: `hostfile: exclude "w3:0": host w3 has no slot 0 (slots 1,3)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			t.Parallel()
			f, err := ParseFilter(tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Include(hosts, f)
			check(t, "Include", got, err, tt.include, tt.incErr)
			got, err = Exclude(hosts, f)
			check(t, "Exclude", got, err, tt.exclude, tt.exclErr)
		})
	}
	if hosts[1].GPUs != nil || hosts[1].Slots != 4 || !reflect.DeepEqual(hosts[3].GPUs, []int{1, 3}) {
		t.Errorf("Include or Exclude modified its input: %#v", hosts)
	}
}

func check(t *testing.T, what string, got []Host, err error, want []Host, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || err.Error() != wantErr {
			t.Errorf("%s error\n got  %v\n want %s", what, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s\n got  %#v\n want %#v", what, got, want)
	}
}
