package hostfile

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []Host
	}{
		{"openmpi.hosts", []Host{
			{Name: "node1", Slots: 4},
			{Name: "node2", Slots: 2, MaxSlots: 8, User: "alice"},
			{Name: "node3", Slots: 8, Port: 2222},
			{Name: "node4", Slots: 1},
			{Name: "10.0.0.5", Slots: 2},
		}},
		{"mpich.hosts", []Host{
			{Name: "node1", Slots: 4},
			{Name: "node2", Slots: 2},
			{Name: "node3", Slots: 1},
		}},
		{"mixed.hosts", []Host{ // BOM, CRLF, tabs, repeated hosts, no final newline
			{Name: "node1", Slots: 5},
			{Name: "node2", Slots: 2},
			{Name: "node3", Slots: 4, MaxSlots: 4, User: "bob", Port: 22},
		}},
		{"ipv6.hosts", []Host{
			{Name: "::1", Slots: 2},
			{Name: "fe80::1%eth0", Slots: 4, User: "alice", Port: 2022},
			{Name: "2001:db8::7", Slots: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		line int
		want string // the error text after "hostfile testdata/bad/FILE:LINE: "
	}{
		{"slots_x.hosts", 3, `bad slots value "x" in "node1 slots=x"`},
		{"slots_zero.hosts", 1, `slots value "0" out of range 1-1000000 in "node1 slots=0"`},
		{"slots_huge.hosts", 1, `bad slots value "99999999999999999999" in "node1 slots=99999999999999999999"`},
		{"slots_plus.hosts", 1, `bad slots value "+4" in "node1 slots=+4"`},
		{"max_lt_slots.hosts", 1, `max_slots=2 less than slots=4 in "node1 max_slots=2 slots=4"`},
		{"unknown_key.hosts", 1, `unknown key "cpu" (want slots, max_slots or port) in "node1 cpu=4"`},
		{"max_dash.hosts", 1, `unknown key "max-slots" (want slots, max_slots or port) in "node1 max-slots=4"`},
		{"dup_key.hosts", 1, `slots given twice in "node1 slots=2 slots=3"`},
		{"slots_twice.hosts", 1, `slots given twice in "node1:2 slots=3"`},
		{"no_equals.hosts", 1, `unexpected "4" after host (want key=value) in "node1 4"`},
		{"no_host.hosts", 1, `missing host name before "slots=4" in "slots=4"`},
		{"double_at.hosts", 1, `bad host "alice@@node1": more than one '@' in "alice@@node1"`},
		{"control.hosts", 1, `bad host name "node\x01x": character '\x01' not allowed in "node\x01x"`},
		{"dash.hosts", 1, `bad host name "-evil": starts with '-' in "-evil slots=1"`},
		{"port_range.hosts", 1, `port value "70000" out of range 1-65535 in "node1 port=70000"`},
		{"ipv6_bad.hosts", 1, `bad IPv6 address "zz::1" in "[zz::1]:2"`},
		{"ipv6_trailer.hosts", 1, `unexpected "x" after IPv6 address in "[::1]x"`},
		{"hydra_extra.hosts", 1, `bad slots value "4:ifhn=eth0" in "node1:4:ifhn=eth0"`},
		{"user_conflict.hosts", 2, `host node1: user "alice" conflicts with user "" at line 1 in "alice@node1"`},
		{"port_conflict.hosts", 3, `host node1: port 23 conflicts with port 22 at line 1 in "node1 port=23"`},
		{"max_conflict.hosts", 2, `host node1: max_slots 8 conflicts with max_slots 4 at line 1 in "node1 max_slots=8"`},
		{"max_exceeded.hosts", 2, `host node1: 5 slots in all exceed max_slots=4 in "node1 slots=2 max_slots=4"`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "bad", tt.file)
			hosts, err := ParseFile(path)
			if err == nil {
				t.Fatalf("got %v, want error", hosts)
			}
			want := fmt.Sprintf("hostfile %s:%d: %s", path, tt.line, tt.want)
			if err.Error() != want {
				t.Errorf("error\n got  %s\n want %s", err, want)
			}
			var le *LineError
			if !errors.As(err, &le) || le.File != path || le.Line != tt.line {
				t.Errorf("error %#v is not a LineError at %s:%d", err, path, tt.line)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
}

func TestParseSourceErrors(t *testing.T) {
	t.Parallel()
	long := "node1 " + strings.Repeat("x", maxLineLen)
	var many strings.Builder
	for i := range maxHosts + 1 {
		fmt.Fprintf(&many, "n%d\n", i)
	}
	tests := []struct {
		name, input, want string
	}{
		{"empty", "", "hostfile src: no hosts"},
		{"comments only", "# a\n\n   # b\n", "hostfile src: no hosts"},
		{"long line", "a\n" + long + "\n", fmt.Sprintf("hostfile src:2: line longer than 4096 bytes in %q", long[:textLimit]+"...")},
		{"very long line", strings.Repeat("y", 3*maxLineLen), fmt.Sprintf("hostfile src:1: line longer than 4096 bytes in %q", strings.Repeat("y", textLimit)+"...")},
		{"too many hosts", many.String(), `hostfile src:100001: more than 100000 hosts in "n100000"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(strings.NewReader(tt.input), "src")
			if err == nil || err.Error() != tt.want {
				t.Errorf("error\n got  %v\n want %s", err, tt.want)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v does not wrap ErrSyntax", err)
			}
		})
	}
}

func TestParseLimitsAccepted(t *testing.T) {
	t.Parallel()
	// A line of exactly 4096 bytes is fine, and so is a host repeated on
	// more lines than the host limit (a PBS-like file with many slots).
	line := "node1" + strings.Repeat(" ", maxLineLen-len("node1 slots=2")) + " slots=2"
	if len(line) != maxLineLen {
		t.Fatalf("test line is %d bytes", len(line))
	}
	input := line + "\n" + strings.Repeat("node1\n", maxHosts+1)
	got, err := Parse(strings.NewReader(input), "src")
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{Name: "node1", Slots: maxHosts + 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	_, err := Parse(iotest.ErrReader(boom), "src")
	if !errors.Is(err, boom) || errors.Is(err, ErrSyntax) || err.Error() != "hostfile src: boom" {
		t.Errorf("got %v, want the read error wrapped", err)
	}
	_, err = Parse(strings.NewReader("a b\n"), "")
	if err == nil || !strings.HasPrefix(err.Error(), "hostfile <input>:1: ") {
		t.Errorf("got %v, want an error naming <input>", err)
	}
}

func TestParseFileMissing(t *testing.T) {
	t.Parallel()
	_, err := ParseFile(filepath.Join("testdata", "no-such-file"))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrSyntax) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}

func TestHostString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host Host
		want string
	}{
		{Host{Name: "node1", Slots: 1}, "node1 slots=1"},
		{Host{Name: "node1", Slots: 4, MaxSlots: 8, User: "alice"}, "alice@node1 slots=4 max_slots=8"},
		{Host{Name: "node1", Slots: 2, Port: 2222}, "node1 slots=2 port=2222"},
		{Host{Name: "fe80::1%eth0", Slots: 2, User: "bob"}, "bob@[fe80::1%eth0] slots=2"},
		{Host{Name: "gpu1", Slots: 2, GPUs: []int{1, 3}}, "gpu1 slots=2"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.host.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			back, err := Parse(strings.NewReader(tt.want), "string")
			if err != nil {
				t.Fatal(err)
			}
			h := tt.host
			h.GPUs = nil
			if !reflect.DeepEqual(back, []Host{h}) {
				t.Errorf("read back %#v, want %#v", back, h)
			}
		})
	}
}

func TestTotal(t *testing.T) {
	t.Parallel()
	if got := Total(nil); got != 0 {
		t.Errorf("Total(nil) = %d", got)
	}
	if got := Total([]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 3}}); got != 5 {
		t.Errorf("Total = %d, want 5", got)
	}
}

func TestLineErrorFormat(t *testing.T) {
	t.Parallel()
	inner := errorf("bad slots value %q", "x")
	tests := []struct {
		err  *LineError
		want string
	}{
		{&LineError{File: "hosts", Line: 3, Text: "node1 slots=x", Err: inner}, `hostfile hosts:3: bad slots value "x" in "node1 slots=x"`},
		{&LineError{File: "hosts", Err: inner}, `hostfile hosts: bad slots value "x"`},
		{&LineError{File: "-H", Line: 2, Text: "b:x", Err: inner}, `-H item 2 "b:x": bad slots value "x"`},
		{&LineError{File: "-H", Err: inner}, `-H: bad slots value "x"`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %s, want %s", got, tt.want)
		}
		if !errors.Is(tt.err, ErrSyntax) || errors.Unwrap(tt.err) != inner {
			t.Errorf("%v: Unwrap does not give Err", tt.err)
		}
	}
}
