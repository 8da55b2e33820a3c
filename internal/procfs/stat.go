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
	return Stat{PID: pid, Comm: string(b[open+1 : shut]), State: f[0][0], PPID: ppid}, nil
}

// Stat reads and parses process pid's stat line. The error wraps
// [io/fs.ErrNotExist] when the process is gone.
func (fs FS) Stat(pid int) (Stat, error) {
	b, err := os.ReadFile(fs.path(pidDir(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}
