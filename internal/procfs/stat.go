// This file holds the parser of /proc/PID/stat.

package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat is what gorun reads of a process's stat line (proc_pid_stat(5)).
type Stat struct {
	PID   int
	Comm  string // the command name, at most 15 bytes; it may hold spaces and parentheses
	State byte   // R, S, D, Z, T, t, X, I...
	PPID  int    // the parent's pid; 0 for the kernel's first processes
	// UTime and STime are the CPU time the process has spent in user
	// and kernel mode, in clock ticks (USER_HZ, 100 a second on Linux);
	// 0 when the line stops before them.
	UTime, STime uint64
}

// ParseStat parses a /proc/PID/stat line. The command name is taken to
// the last ')' on the line, since the name itself may hold ") ".
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	shut := bytes.LastIndexByte(b, ')')
	if open < 0 || shut < open {
		return Stat{}, fmt.Errorf("%w: stat: no command in parentheses", ErrFormat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: stat: pid: %v", ErrFormat, err)
	}
	// state ppid pgrp session ...: the fields after the command.
	f := bytes.Fields(b[shut+1:])
	if len(f) < 2 {
		return Stat{}, fmt.Errorf("%w: stat: no state and parent after the command", ErrFormat)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: stat: parent: %v", ErrFormat, err)
	}
	st := Stat{PID: pid, Comm: string(b[open+1 : shut]), State: f[0][0], PPID: ppid}
	// ... flags minflt cminflt majflt cmajflt utime stime: fields 14 and
	// 15 of the line, 11 and 12 after the command.
	if len(f) > 12 {
		st.UTime, _ = strconv.ParseUint(string(f[11]), 10, 64)
		st.STime, _ = strconv.ParseUint(string(f[12]), 10, 64)
	}
	return st, nil
}

// UserHZ is the unit of [Stat.UTime] and [Stat.STime]: clock ticks a
// second, which Linux fixes at 100 for every architecture it exports to
// user space.
const UserHZ = 100

// Stat reads and parses process pid's stat line. The error wraps
// [io/fs.ErrNotExist] when the process is gone.
func (fs FS) Stat(pid int) (Stat, error) {
	b, err := os.ReadFile(fs.path(pidDir(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}
