// This file holds FS, the listing of processes and a process's children
// and open descriptors.

package procfs

import (
	"errors"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrFormat is wrapped by the parsers' errors when a file does not read as
// the kernel writes it.
var ErrFormat = errors.New("procfs: unexpected format")

// FS is a proc file system mounted at the directory it names, as
// [net/http.Dir] names a directory of files. Tests name a tree under
// testdata.
type FS string

// Proc is the proc file system of the running kernel.
const Proc FS = "/proc"

// path is the file at the slash-separated name under fs.
func (fs FS) path(name ...string) string {
	return filepath.Join(append([]string{string(fs)}, name...)...)
}

// pidDir is the name of process pid's directory.
func pidDir(pid int) string { return strconv.Itoa(pid) }

// PIDs lists the processes, in the order of the directory (ascending in
// /proc); nil when fs cannot be read.
func (fs FS) PIDs() []int {
	ents, _ := os.ReadDir(string(fs))
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Children lists the processes whose parent is ppid. Where the kernel has
// /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) it reads them from
// there, for every thread of ppid; otherwise it scans every process's stat
// line for its parent. Like any reading of /proc it is a snapshot: a child
// forked or reaped meanwhile may be missed or still listed.
func (fs FS) Children(ppid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fs.path(pidDir(ppid), "task"))
	found := false
	for _, t := range tasks {
		b, err := os.ReadFile(fs.path(pidDir(ppid), "task", t.Name(), "children"))
		if err != nil {
			continue
		}
		found = true
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	if found {
		return out
	}
	for _, pid := range fs.PIDs() {
		if st, err := fs.Stat(pid); err == nil && st.PPID == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// Tree lists pid and its descendants, breadth first, each process's
// children in pid order, at most max of them. Like Children, it is a
// snapshot.
func (fs FS) Tree(pid, max int) []int {
	out := []int{pid}
	for i := 0; i < len(out) && len(out) < max; i++ {
		kids := fs.Children(out[i])
		slices.Sort(kids)
		out = append(out, kids...)
	}
	return out[:min(len(out), max)]
}

// FDs yields the open descriptors of process pid: the path of each one's
// link in /proc/PID/fd (which stat(2) follows to the open file itself) and
// what the link reads. It yields nothing when pid is gone or may not be
// read, and skips a descriptor closed while it reads.
func (fs FS) FDs(pid int) iter.Seq2[string, string] {
	return func(yield func(link, target string) bool) {
		dir := fs.path(pidDir(pid), "fd")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			link := filepath.Join(dir, e.Name())
			target, err := os.Readlink(link)
			if err != nil {
				continue
			}
			if !yield(link, target) {
				return
			}
		}
	}
}

// FDCount returns how many descriptors process pid has open, from
// /proc/PID/fd; -1 when it cannot be read.
func (fs FS) FDCount(pid int) int {
	f, err := os.Open(fs.path(pidDir(pid), "fd"))
	if err != nil {
		return -1
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names)
}
