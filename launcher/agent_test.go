package launcher

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestFreePortOutsideEphemeralRange(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range")
	}
	f := strings.Fields(string(b))
	lo, _ := strconv.Atoi(f[0])
	hi, _ := strconv.Atoi(f[1])
	seen := map[int]bool{}
	for range 50 {
		p := freePort()
		if p == 0 || p >= lo && p <= hi || p < 1024 {
			t.Fatalf("freePort() = %d, inside the ephemeral range %d-%d or privileged", p, lo, hi)
		}
		// That it was free when chosen cannot be re-checked here without
		// racing the other tests that listen on such ports meanwhile.
		seen[p] = true
	}
	if len(seen) < 10 {
		t.Fatalf("freePort chose only %d distinct ports in 50 calls: a fixed default?", len(seen))
	}
}

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
