package launcher

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The port an agent offers for MASTER_PORT lies outside the ephemeral
// range and is chosen at random. While the agent holds it, nothing can
// bind it, not even with SO_REUSEADDR as torch's store does, and nothing
// listens there: a connection is refused at once (nothing of gorun's
// takes connections that would cost it CPU). Let go, rank 0 binds it.
func TestHoldFreePort(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatalf("the ephemeral range: %v", err)
	}
	f := strings.Fields(string(b))
	lo, _ := strconv.Atoi(f[0])
	hi, _ := strconv.Atoi(f[1])
	seen := map[int]bool{}
	for range 20 {
		h := holdFreePort()
		if h == nil {
			t.Fatal("no port held")
		}
		p := h.port
		if p >= lo && p <= hi || p < 1024 {
			t.Fatalf("holdFreePort() = %d, inside the ephemeral range %d-%d or privileged", p, lo, hi)
		}
		seen[p] = true
		for _, addr := range []string{":", "127.0.0.1:", "0.0.0.0:"} {
			if ln, err := net.Listen("tcp", addr+strconv.Itoa(p)); err == nil {
				ln.Close()
				t.Fatalf("a listener bound %s%d while the agent held it", addr, p)
			} else if !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("listening on %s%d: %v, want EADDRINUSE", addr, p, err)
			}
		}
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			c.Close()
			t.Fatalf("a connection to the held port %d was taken", p)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("connecting to the held port %d: %v, want ECONNREFUSED", p, err)
		}
		h.release()
		h.release() // again: nothing
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("rank 0 cannot bind %d once let go: %v", p, err)
		}
		ln.Close()
	}
	if len(seen) < 5 {
		t.Fatalf("holdFreePort chose only %d distinct ports in 20 calls: a fixed default?", len(seen))
	}
	var none *heldPort
	none.release()
}
