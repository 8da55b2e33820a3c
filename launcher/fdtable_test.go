package launcher

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/procfs"
)

// fdSize is the capacity of this process's descriptor table.
func fdSize(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(procfs.Proc.StatusField(os.Getpid(), "FDSize"))
	if err != nil {
		t.Fatalf("FDSize: %v", err)
	}
	return n
}

// The table grows in one step to the launch's room, leaves no descriptor
// open behind it, and is then found to fit; a target beyond the open-file
// limit grows nothing. Not parallel: other tests' descriptors would move
// the highest one.
func TestGrowFDTable(t *testing.T) {
	size := fdSize(t)
	if _, _, short := fdTarget(0); short {
		t.Fatalf("a table of %d entries with %d open is short of room for none", size, procfs.Proc.MaxFD(os.Getpid())+1)
	}
	room := size + fdRoom(64) // beyond what the table holds now
	target, src, short := fdTarget(room)
	if !short {
		t.Fatalf("a table of %d entries fits %d more descriptors", size, room)
	}
	hi := procfs.Proc.MaxFD(os.Getpid())
	if target != hi+room || src != hi {
		t.Fatalf("fdTarget(%d) = %d from %d, want %d from %d", room, target, src, hi+room, hi)
	}
	if !growFDTable(src, target) {
		t.Fatalf("growFDTable(%d, %d) failed", src, target)
	}
	if got := fdSize(t); got <= target {
		t.Errorf("table of %d entries after growing it to hold descriptor %d", got, target)
	}
	if got := procfs.Proc.MaxFD(os.Getpid()); got != hi {
		t.Errorf("highest open descriptor %d after growing, %d before: the copy was left open", got, hi)
	}
	if _, _, short := fdTarget(room); short {
		t.Errorf("still short of room for %d after growing to %d entries", room, fdSize(t))
	}

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	before := fdSize(t)
	if growFDTable(src, int(min(lim.Cur, 1<<30))+8) {
		t.Errorf("grew the table beyond the open-file limit %d", lim.Cur)
	}
	if got := fdSize(t); got != before {
		t.Errorf("table of %d entries after a failed growth, %d before", got, before)
	}
}
