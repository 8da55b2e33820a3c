package hostfile

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A Grid Engine PE_HOSTFILE gives each host's slots on its line; a host
// on two lines (two of its queues) gets their sum, in the order of its
// first line, and the queue and processor fields are not read.
func TestParsePEHostfile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []Host
	}{
		{"pe_hostfile", []Host{{Name: "node01", Slots: 4}, {Name: "node02", Slots: 2}}},
		{"two_queues", []Host{{Name: "node01", Slots: 5}, {Name: "node02", Slots: 1}}},
		{"crlf_short", []Host{{Name: "node01", Slots: 4}, {Name: "node02", Slots: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePEHostfile(filepath.Join("testdata", "pe", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// A bad line is refused naming the file and the line, what is wrong and
// the line's text; a file without hosts is refused naming the file.
func TestParsePEHostfileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ file, want string }{
		{"bad_slots", `:2: bad slot count value "x" in "node02 x all.q@node02 UNDEFINED"`},
		{"zero_slots", `:2: slot count value "0" out of range 1-1000000 in "node02 0 all.q@node02 UNDEFINED"`},
		{"no_slots", `:3: want "host slots queue processors" in "node02"`},
		{"too_many", `:2: host node01: more than 1000000 slots in all in "node01 1 b.q@node01 UNDEFINED"`},
		{"bad_name", `:1: bad host name "node/01": character '/' not allowed in "node/01 4 all.q UNDEFINED"`},
		{"empty", `: no hosts`},
		{"blank", `: no hosts`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "pe", tt.file)
			hosts, err := ParsePEHostfile(path)
			if err == nil {
				t.Fatalf("got %v, want error", hosts)
			}
			if want := "hostfile " + path + tt.want; err.Error() != want {
				t.Errorf("error\n got  %s\n want %s", err, want)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
	_, err := ParsePEHostfile(filepath.Join("testdata", "pe", "missing"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("got %v, want a not-exist error naming the file", err)
	}
}

// LSF's LSB_MCPU_HOSTS pairs each host with its slots; a host named twice
// gets both pairs' slots. An odd number of words, a bad count or a bad
// name is refused quoting the variable's value.
func TestFromLSFHosts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []Host
		err  string
	}{
		{in: "node01 4 node02 4", want: []Host{{Name: "node01", Slots: 4}, {Name: "node02", Slots: 4}}},
		{in: "  node01 1\n", want: []Host{{Name: "node01", Slots: 1}}},
		{in: "node01 2 node02 1 node01 3", want: []Host{{Name: "node01", Slots: 5}, {Name: "node02", Slots: 1}}},
		{in: "", err: `hostfile: LSB_MCPU_HOSTS "": no hosts`},
		{in: "   ", err: `hostfile: LSB_MCPU_HOSTS "   ": no hosts`},
		{in: "node01 4 node02", err: `hostfile: LSB_MCPU_HOSTS "node01 4 node02": want pairs of host and slots, found 3 words`},
		{in: "node01 4 node02 x", err: `hostfile: LSB_MCPU_HOSTS "node01 4 node02 x": host node02: bad slot count value "x"`},
		{in: "node01 0", err: `hostfile: LSB_MCPU_HOSTS "node01 0": host node01: slot count value "0" out of range 1-1000000`},
		{in: "node01 -1", err: `hostfile: LSB_MCPU_HOSTS "node01 -1": host node01: bad slot count value "-1"`},
		{in: "4 node01", err: `hostfile: LSB_MCPU_HOSTS "4 node01": host 4: bad slot count value "node01"`},
		{in: "node/1 2", err: `hostfile: LSB_MCPU_HOSTS "node/1 2": bad host name "node/1": character '/' not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := FromLSFHosts(tt.in)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("got %v, %v, want error %s", got, err, tt.err)
				}
				if !errors.Is(err, ErrSyntax) {
					t.Errorf("error %v does not wrap ErrSyntax", err)
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
