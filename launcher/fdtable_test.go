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
// open behind it, and is then found to fit; a descriptor open high up
// does not count as room taken; a target beyond the open-file limit grows
// nothing. Not parallel: other tests' descriptors would move the count.
func TestGrowFDTable(t *testing.T) {
	size := fdSize(t)
	if _, short := fdTarget(0); short {
		t.Fatalf("a table of %d entries with %d open is short of room for none", size, procfs.Proc.FDCount(os.Getpid()))
	}
	// One descriptor at the table's top: the room below it is free.
	high, err := unix.FcntlInt(uintptr(unix.Stderr), unix.F_DUPFD_CLOEXEC, size-1)
	if err != nil {
		t.Fatal(err)
	}
	if _, short := fdTarget(8); short {
		t.Errorf("descriptor %d open: short of room for 8 more in a table of %d", high, size)
	}
	unix.Close(high)

	room := size + fdRoom(64) // beyond what the table holds now
	target, short := fdTarget(room)
	open := procfs.Proc.FDCount(os.Getpid())
	if !short || target != open+room {
		t.Fatalf("fdTarget(%d) = %d, %v with %d open in a table of %d; want %d, true", room, target, short, open, size, open+room)
	}
	if !growFDTable(target) {
		t.Fatalf("growFDTable(%d) failed", target)
	}
	if got := fdSize(t); got <= target {
		t.Errorf("table of %d entries after growing it to hold descriptor %d", got, target)
	}
	if got := procfs.Proc.FDCount(os.Getpid()); got != open {
		t.Errorf("%d descriptors open after growing, %d before: one was left open", got, open)
	}
	if _, short := fdTarget(room); short {
		t.Errorf("still short of room for %d after growing to %d entries", room, fdSize(t))
	}

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	before := fdSize(t)
	if growFDTable(int(min(lim.Cur, 1<<30)) + 8) {
		t.Errorf("grew the table beyond the open-file limit %d", lim.Cur)
	}
	if got := fdSize(t); got != before {
		t.Errorf("table of %d entries after a failed growth, %d before", got, before)
	}
}
