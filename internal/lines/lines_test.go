package lines

import (
	"slices"
	"testing"
)

func TestBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   []string // lines, then the flushed rest last if any
	}{
		{"whole lines", []string{"a\nb\n"}, []string{"a\n", "b\n"}},
		{"a line across writes", []string{"ab", "c\nd", "e\n"}, []string{"abc\n", "de\n"}},
		{"an unended last line", []string{"a\nrest"}, []string{"a\n", "rest"}},
		{"empty lines", []string{"\n\n"}, []string{"\n", "\n"}},
		{"nothing", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Buffer
			var got []string
			add := func(l []byte) { got = append(got, string(l)) }
			for _, w := range tt.writes {
				b.Feed([]byte(w), add)
			}
			b.Flush(add)
			b.Flush(add) // a second flush has nothing left
			if !slices.Equal(got, tt.want) {
				t.Errorf("lines %q, want %q", got, tt.want)
			}
		})
	}
}
