package hostfile

import (
	"strconv"
	"strings"
	"testing"
)

// The sequential mapper's reading: one rank a line, in line order, a host
// repeated as often as it is listed, slots ignored; bad lines named as
// Parse names them.
func TestParseSequence(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // host per rank, comma-separated
		lines    string // line per rank
		err      string
	}{
		{"three hosts", "h1 slots=2\nh2\n# comment\nh3:4\n", "h1,h2,h3", "1,2,4", ""},
		{"repeated host", "h1\nh2\nh1\n", "h1,h2,h1", "1,2,3", ""},
		{"user and port", "alice@h1 port=2222\n", "h1", "1", ""},
		{"bad key", "h1\nh2 cores=4\n", "", "", `hf:2: unknown key "cores"`},
		{"empty", "# nothing\n", "", "", "no hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSequence(strings.NewReader(tt.in), "hf")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var hosts, lines []string
			for i, rs := range got {
				if rs.Rank != i || rs.Relative != -1 || rs.Slot.Text != "" {
					t.Errorf("rank %d: %+v, want rank %d, no +n, no slot", i, rs, i)
				}
				hosts = append(hosts, rs.Host)
				lines = append(lines, strconv.Itoa(rs.Line))
			}
			if h := strings.Join(hosts, ","); h != tt.want {
				t.Errorf("hosts = %s, want %s", h, tt.want)
			}
			if l := strings.Join(lines, ","); l != tt.lines {
				t.Errorf("lines = %s, want %s", l, tt.lines)
			}
		})
	}
}
