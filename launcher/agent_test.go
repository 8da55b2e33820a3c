package launcher

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	t.Parallel()
	var tl tail
	for i := range 30 {
		tl.write([]byte("line " + strconv.Itoa(i) + "\n"))
	}
	got := tl.String()
	if !strings.HasPrefix(got, "line 20\n") || !strings.HasSuffix(got, "line 29") || strings.Count(got, "\n") != 9 {
		t.Fatalf("tail = %q, want lines 20-29", got)
	}
	tl.write([]byte(strings.Repeat("x", 5000)))
	if len(tl.String()) != tailBytes {
		t.Fatalf("tail of a long write is %d bytes, want %d", len(tl.String()), tailBytes)
	}
}

func TestIsLocal(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	for _, n := range []string{"localhost", "127.0.0.1", "127.0.1.1", "::1", host} {
		if !IsLocal(n) {
			t.Errorf("IsLocal(%q) = false", n)
		}
	}
	for _, n := range []string{"198.51.100.7", "node-that-is-not-here", "2001:db8::1"} {
		if IsLocal(n) {
			t.Errorf("IsLocal(%q) = true", n)
		}
	}
}
