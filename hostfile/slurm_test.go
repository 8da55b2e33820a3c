package hostfile

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestExpandNodelist(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"node[01-04,07],gpu-[1-2]", []string{"node01", "node02", "node03", "node04", "node07", "gpu-1", "gpu-2"}},
		{"n[08-11]", []string{"n08", "n09", "n10", "n11"}},
		{"n[8-11]", []string{"n8", "n9", "n10", "n11"}},
		{"n[098-101]", []string{"n098", "n099", "n100", "n101"}},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"rack[1-2]-node[3,5]-ib", []string{"rack1-node3-ib", "rack1-node5-ib", "rack2-node3-ib", "rack2-node5-ib"}},
		{"a,a,b", []string{"a", "a", "b"}},
		{"single", []string{"single"}},
		{"n[5]", []string{"n5"}},
		{"[1-2]", []string{"1", "2"}},
		{"10.0.0.[1-3]", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{" n[1-2] ", []string{"n1", "n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ExpandNodelist(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExpandNodelistLarge(t *testing.T) {
	t.Parallel()
	got, err := ExpandNodelist("n[1-1000]x[1-1000]")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxExpand || got[0] != "n1x1" || got[len(got)-1] != "n1000x1000" {
		t.Errorf("got %d names from %q to %q", len(got), got[0], got[len(got)-1])
	}
}

func TestExpandNodelistErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `empty nodelist`},
		{"n[", `unbalanced '['`},
		{"n]", `unbalanced ']' at offset 1`},
		{"n[1-[2]]", `nested '[' at offset 4`},
		{"n[3-1]", `reversed range "3-1"`},
		{"n[]", `empty range "[]"`},
		{"n[1,,2]", `bad range ""`},
		{"n[1-]", `bad range "1-"`},
		{"n[a-b]", `bad range "a-b"`},
		{"n[1-2-3]", `bad range "1-2-3"`},
		{"n[1234567890123456789]", `bad range "1234567890123456789"`},
		{"n[1-2],,x", `empty host name`},
		{"a b", `bad host name "a b": character ' ' not allowed`},
		{"a@b", `bad host name "a@b": character '@' not allowed`},
		{"-a", `bad host name "-a": starts with '-'`},
		{"n[0-999999999]", `range [0-999999999] has more than 1000000 numbers`},
		{"n[1-1000]x[1-1001]", `"n[1-1000]x[1-1001]" expands to more than 1000000 names`},
		{"n[1-999999],m[1-2]", `"m[1-2]" makes the expansion exceed 1000000 names`},
		{"n[1-500000,1-500001]", `range [1-500000,1-500001] has more than 1000000 numbers`},
		{strings.Repeat("a", 250) + "[100000-999999]", `bad host name "` + strings.Repeat("a", 250) + `[100000-999999]": longer than 255 bytes`},
		{strings.Repeat("a", 100) + "[1-999999]", `"` + strings.Repeat("a", 100) + `[1-999999]" makes the expansion exceed 67108864 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			names, err := ExpandNodelist(tt.in)
			if err == nil {
				t.Fatalf("got %d names, want error", len(names))
			}
			want := "hostfile: nodelist " + strconv.Quote(tt.in) + ": " + tt.want
			if err.Error() != want {
				t.Errorf("error\n got  %s\n want %s", err, want)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
}

func TestParseTasksPerNode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []int
	}{
		{"2(x3),1", []int{2, 2, 2, 1}},
		{"4(x2)", []int{4, 4}},
		{"4,3,1", []int{4, 3, 1}},
		{"1", []int{1}},
		{"8(x1)", []int{8}},
		{"1(x2),3,2(x2)", []int{1, 1, 3, 2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTasksPerNode(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseTasksPerNodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `empty list`},
		{"2(x", `bad item "2(x" (want N or N(xM))`},
		{"2(3)", `bad item "2(3)" (want N or N(xM))`},
		{"2(x3", `bad item "2(x3" (want N or N(xM))`},
		{"2(x3)x", `bad item "2(x3)x" (want N or N(xM))`},
		{"0", `task count value "0" out of range 1-1000000`},
		{"2(x0)", `repeat value "0" out of range 1-1000000`},
		{"2,,1", `bad task count value ""`},
		{"-1", `bad task count value "-1"`},
		{"x", `bad task count value "x"`},
		{"1(x1000001)", `repeat value "1000001" out of range 1-1000000`},
		{"1(x999999),1,1", `more than 1000000 nodes`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			counts, err := ParseTasksPerNode(tt.in)
			if err == nil {
				t.Fatalf("got %v, want error", counts)
			}
			want := "hostfile: tasks per node " + strconv.Quote(tt.in) + ": " + tt.want
			if err.Error() != want {
				t.Errorf("error\n got  %s\n want %s", err, want)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
}

func TestFromSlurm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		nodes, tasks string
		want         []Host
		err          string
	}{
		{nodes: "n[1-3]", tasks: "2(x2),1", want: []Host{{Name: "n1", Slots: 2}, {Name: "n2", Slots: 2}, {Name: "n3", Slots: 1}}},
		{nodes: "gpu[01-02],cpu1", tasks: "8,8,4", want: []Host{{Name: "gpu01", Slots: 8}, {Name: "gpu02", Slots: 8}, {Name: "cpu1", Slots: 4}}},
		{nodes: "a,b,a", tasks: "1,2,3", want: []Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 2}}},
		{nodes: "n[1-3]", tasks: "2(x2)", err: `hostfile: nodelist "n[1-3]" has 3 nodes but tasks per node "2(x2)" has 2 counts`},
		{nodes: "n[1-", tasks: "1", err: `hostfile: nodelist "n[1-": unbalanced '['`},
		{nodes: "n1", tasks: "x", err: `hostfile: tasks per node "x": bad task count value "x"`},
		{nodes: "n[1-200000]", tasks: "1(x200000)", err: `hostfile: nodelist "n[1-200000]": more than 100000 hosts`},
	}
	for _, tt := range tests {
		t.Run(tt.nodes+" "+tt.tasks, func(t *testing.T) {
			t.Parallel()
			got, err := FromSlurm(tt.nodes, tt.tasks)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ErrSyntax) {
					t.Errorf("error\n got  %v\n want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
