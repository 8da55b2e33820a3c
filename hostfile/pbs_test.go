package hostfile

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParsePBSNodefile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []Host
	}{
		{"nodefile", []Host{{Name: "n1", Slots: 3}, {Name: "n2", Slots: 2}, {Name: "n3", Slots: 1}}},
		{"crlf_ipv6", []Host{{Name: "n1", Slots: 1}, {Name: "n2", Slots: 1}, {Name: "::1", Slots: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePBSNodefile(filepath.Join("testdata", "pbs", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParsePBSNodefileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ file, want string }{
		{"bad_space", `:2: bad host name "n 2": character ' ' not allowed in "n 2"`},
		{"bad_slots", `:2: bad host name "n2 slots=2": character ' ' not allowed in "n2 slots=2"`},
		{"bad_comment", `:2: bad host name "#comment": character '#' not allowed in "#comment"`},
		{"empty", `: no hosts`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "pbs", tt.file)
			hosts, err := ParsePBSNodefile(path)
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
	_, err := ParsePBSNodefile(filepath.Join("testdata", "pbs", "missing"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}
