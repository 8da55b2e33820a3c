package hostfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseHostList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []Host
	}{
		{"a:2,b:2,alice@c", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}, {Name: "c", Slots: 1, User: "alice"}}},
		{"node1", []Host{{Name: "node1", Slots: 1}}},
		{" a , b:3 ", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 3}}},
		{"a,b,a:2", []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 1}}},
		{"node[01-04]:2", []Host{
			{Name: "node01", Slots: 2}, {Name: "node02", Slots: 2},
			{Name: "node03", Slots: 2}, {Name: "node04", Slots: 2},
		}},
		{"node[1,3]:2,x", []Host{{Name: "node1", Slots: 2}, {Name: "node3", Slots: 2}, {Name: "x", Slots: 1}}},
		{"bob@r[1-2]n[1-2]", []Host{
			{Name: "r1n1", Slots: 1, User: "bob"}, {Name: "r1n2", Slots: 1, User: "bob"},
			{Name: "r2n1", Slots: 1, User: "bob"}, {Name: "r2n2", Slots: 1, User: "bob"},
		}},
		{"n[1-2],n2:3", []Host{{Name: "n1", Slots: 1}, {Name: "n2", Slots: 4}}},
		{"[::1]:2,alice@[fe80::1%eth0]", []Host{{Name: "::1", Slots: 2}, {Name: "fe80::1%eth0", Slots: 1, User: "alice"}}},
		{"10.0.0.1:8,10.0.0.2:8", []Host{{Name: "10.0.0.1", Slots: 8}, {Name: "10.0.0.2", Slots: 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 40)], func(t *testing.T) {
			t.Parallel()
			got, err := ParseHostList(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestParseHostListErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		item int
		want string
	}{
		{"a,b:x", 2, `-H item 2 "b:x": bad slots value "x"`},
		{"a:0", 1, `-H item 1 "a:0": slots value "0" out of range 1-1000000`},
		{"a,,b", 2, `-H item 2 "": empty item`},
		{"a,", 2, `-H item 2 "": empty item`},
		{"", 0, `-H: empty host list`},
		{"a,alice@a", 2, `-H item 2 "alice@a": host a: user "alice" conflicts with user "" at item 1`},
		{"a@@b", 1, `-H item 1 "a@@b": bad host "a@@b": more than one '@'`},
		{"a b", 1, `-H item 1 "a b": bad host name "a b": character ' ' not allowed`},
		{"-oops", 1, `-H item 1 "-oops": bad host name "-oops": starts with '-'`},
		{"n[1:2]", 1, `-H item 1 "n[1:2]": bad range "1:2"`},
		{"a[2-1]", 1, `-H item 1 "a[2-1]": reversed range "2-1"`},
		{"a[1-2", 0, `-H: host list "a[1-2": unbalanced '['`},
		{"a]", 0, `-H: host list "a]": unbalanced ']' at offset 1`},
		{"x,n[0-999999999]", 2, `-H item 2 "n[0-999999999]": range [0-999999999] has more than 1000000 numbers`},
		{strings.Repeat("n[1-100000],", 10) + "n1", 11, `-H item 11 "n1": "n1" makes the expansion exceed 1000000 names`},
		{"n[0-200000]", 1, `-H item 1 "n[0-200000]": more than 100000 hosts`},
		{"[::1]x", 1, `-H item 1 "[::1]x": unexpected "x" after IPv6 address`},
		{"a:1:2", 1, `-H item 1 "a:1:2": bad slots value "1:2"`},
		{"a port=2", 1, `-H item 1 "a port=2": bad host name "a port=2": character ' ' not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 40)], func(t *testing.T) {
			t.Parallel()
			hosts, err := ParseHostList(tt.in)
			if err == nil {
				t.Fatalf("got %v, want error", hosts)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got  %s\n want %s", err, tt.want)
			}
			var le *LineError
			if !errors.As(err, &le) || le.File != "-H" || le.Line != tt.item {
				t.Errorf("error %#v is not a LineError for -H item %d", err, tt.item)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
}
