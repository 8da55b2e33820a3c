package stacks

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/procfs"
)

// readNative fills p's threads by eu-stack, else gdb, and names the
// threads from /proc. It returns the note to give p: why it has no frames
// (Method MethodProc then), or why the first tool failed.
func readNative(ctx context.Context, pfs procfs.FS, p *Proc, o Options) string {
	if tid := uninterruptible(pfs, p.PID); tid >= 0 {
		p.Method = MethodProc
		w := pfs.WChan(p.PID)
		if w != "" {
			w = " in " + w
		}
		return fmt.Sprintf("thread %d in uninterruptible sleep (D)%s: not attached, since it could not stop", tid, w)
	}
	var notes []string
	tried := false
	if eu := lookTool(o.EuStack, "eu-stack"); eu != "" {
		tried = true
		args := []string{"-m", "-s", "-p", strconv.Itoa(p.PID)}
		if o.NoLines {
			args = []string{"-m", "-p", strconv.Itoa(p.PID)}
		}
		r := runTool(ctx, pfs, p.PID, o.toolTimeout(), eu, args...)
		// eu-stack exits 1 when it could not unwind a thread to its end
		// (a Go program's), having printed what it could.
		if th := parseEuStack(r.stdout); len(th) > 0 {
			p.Threads, p.Method = th, MethodEuStack
			nameThreads(pfs, p)
			return joinNote(notes...)
		}
		notes = append(notes, toolFailure(pfs, p.PID, "eu-stack", r))
		if r.timedOut { // gdb, slower, would not do better
			p.Method = MethodProc
			return joinNote(notes...)
		}
	}
	if gdb := lookTool(o.GDB, "gdb"); gdb != "" && ctx.Err() == nil {
		tried = true
		r := runTool(ctx, pfs, p.PID, o.toolTimeout(), gdb, "-batch", "-nx",
			"-iex", "set debuginfod enabled off", "-iex", "set print frame-info location-and-address",
			"-p", strconv.Itoa(p.PID), "-ex", "thread apply all bt")
		if th := parseGDB(r.stdout); len(th) > 0 {
			p.Threads, p.Method = th, MethodGDB
			fillModules(pfs, p)
			nameThreads(pfs, p)
			return joinNote(notes...)
		}
		notes = append(notes, toolFailure(pfs, p.PID, "gdb", r))
	}
	if !tried {
		notes = append(notes, "no native frames: neither eu-stack nor gdb is installed (apt-get install elfutils gdb)")
	}
	p.Method = MethodProc
	return joinNote(notes...)
}

// nameThreads marks p's main thread (the one whose id is the pid) and
// names every thread from its comm where the tool did not.
func nameThreads(pfs procfs.FS, p *Proc) {
	for i := range p.Threads {
		t := &p.Threads[i]
		t.Main = t.ID == int64(p.PID)
		if t.Name == "" {
			t.Name = pfs.TaskComm(p.PID, int(t.ID))
		}
	}
}

// fillModules gives gdb's frames that lack a module (those with debug
// information: gdb prints their source instead) the file mapped at their
// address in p.
func fillModules(pfs procfs.FS, p *Proc) {
	var maps []procfs.Mapping
	for m := range pfs.FileMappings(p.PID) {
		maps = append(maps, m)
	}
	for i := range p.Threads {
		for j := range p.Threads[i].Frames {
			f := &p.Threads[i].Frames[j]
			if f.Module != "" || f.addr == 0 {
				continue
			}
			for _, m := range maps {
				if f.addr >= m.Start && f.addr < m.End {
					f.Module = m.Path
					break
				}
			}
		}
	}
}

// parseEuStack parses the output of eu-stack -m [-s] -p PID:
//
//	PID 28590 - process
//	TID 28590:
//	#0  0x00007f499f6412ec read - /usr/lib/x86_64-linux-gnu/libc.so.6
//	    ../sysdeps/unix/sysv/linux/read.c:26:10
//	#1  0x00005588a07d11a5 read_input - /tmp/t
//	#2  0x00007f23a5ad9430 - /usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2
//
// A frame's function is absent where eu-stack has no symbol for it, its
// module where the address is in no mapped file; the source line (-s)
// follows where there is debug information.
func parseEuStack(b []byte) []Thread {
	var out []Thread
	var cur *Thread
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "TID "):
			id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(line, "TID "), ":"), 10, 64)
			if err != nil {
				cur = nil
				continue
			}
			out = append(out, Thread{ID: id})
			cur = &out[len(out)-1]
		case cur == nil:
		case strings.HasPrefix(line, "#"):
			if f, ok := parseEuFrame(line); ok {
				cur.Frames = append(cur.Frames, f)
			}
		case strings.HasPrefix(line, "    ") && len(cur.Frames) > 0:
			f := &cur.Frames[len(cur.Frames)-1]
			f.File, f.Line = splitFileLine(strings.TrimSpace(line))
		}
	}
	return out
}

// parseEuFrame parses "#N  0xADDR [FUNC][ - MODULE]".
func parseEuFrame(line string) (Frame, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[1], "0x") {
		return Frame{}, false
	}
	addr, _ := strconv.ParseUint(f[1][2:], 16, 64)
	_, rest, _ := strings.Cut(line, f[1])
	rest = strings.TrimSpace(rest)
	var fn, mod string
	if m, ok := strings.CutPrefix(rest, "- "); ok {
		mod = m
	} else if i := strings.LastIndex(rest, " - "); i >= 0 {
		fn, mod = rest[:i], rest[i+3:]
	} else {
		fn = rest
	}
	if fn == "" {
		fn = "??"
	}
	return Frame{Func: fn, Module: mod, addr: addr}, true
}

// splitFileLine splits "FILE:LINE[:COL]" (eu-stack) or "FILE:LINE" (gdb).
func splitFileLine(s string) (string, int) {
	file, line := s, 0
	for range 2 {
		i := strings.LastIndexByte(file, ':')
		if i < 0 {
			break
		}
		n, err := strconv.Atoi(file[i+1:])
		if err != nil {
			break
		}
		file, line = file[:i], n
	}
	return file, line
}

// parseGDB parses the output of gdb -batch -ex 'thread apply all bt':
//
//	Thread 2 (Thread 0x7f499f5456c0 (LWP 28591) "t"):
//	#0  0x00007f499f61cdf2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
//	#1  0x00007f23a555bef2 in ucp_worker_progress () from /lib/x86_64-linux-gnu/libucp.so.0
//	#2  read_input (buf=0x7ffca41a0ab0 "", n=64) at t.c:7
//
// Thread headers name the kernel's thread id (LWP, or "process N" without
// libthread_db) and the thread's name; frames carry arguments, which may
// hold parentheses and quoted strings, and an address except where gdb
// leaves it out (frame 0 at the start of a line, and inlined frames,
// unless "set print frame-info location-and-address").
func parseGDB(b []byte) []Thread {
	var out []Thread
	var cur *Thread
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "Thread "):
			t, ok := parseGDBThread(line)
			if !ok {
				cur = nil
				continue
			}
			out = append(out, t)
			cur = &out[len(out)-1]
		case cur != nil && strings.HasPrefix(line, "#"):
			if f, ok := parseGDBFrame(line); ok {
				cur.Frames = append(cur.Frames, f)
			}
		}
	}
	return out
}

// parseGDBThread parses `Thread 2 (Thread 0x7f.. (LWP 28591) "name"):`.
func parseGDBThread(line string) (Thread, bool) {
	var t Thread
	for _, key := range []string{"(LWP ", "(process "} {
		if _, rest, ok := strings.Cut(line, key); ok {
			num, _, _ := strings.Cut(rest, ")")
			id, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return t, false
			}
			t.ID = id
			if q := strings.IndexByte(rest, '"'); q >= 0 {
				if e := strings.LastIndexByte(rest, '"'); e > q {
					t.Name = rest[q+1 : e]
				}
			}
			return t, true
		}
	}
	return t, false
}

// parseGDBFrame parses "#N  [0xADDR in ]FUNC (ARGS)[ at FILE:LINE| from MODULE]".
func parseGDBFrame(line string) (Frame, bool) {
	_, rest, ok := strings.Cut(line, " ")
	if !ok {
		return Frame{}, false
	}
	rest = strings.TrimSpace(rest)
	var f Frame
	if a, r, ok := strings.Cut(rest, " in "); ok && strings.HasPrefix(a, "0x") && !strings.ContainsAny(a, " (") {
		f.addr, _ = strconv.ParseUint(a[2:], 16, 64)
		rest = r
	}
	name, tail := rest, ""
	if i := strings.Index(rest, " ("); i >= 0 {
		name = rest[:i]
		tail = skipParens(rest[i+1:])
	}
	f.Func = name
	if f.Func == "" {
		f.Func = "??"
	}
	tail = strings.TrimSpace(tail)
	if s, ok := strings.CutPrefix(tail, "at "); ok {
		f.File, f.Line = splitFileLine(s)
	} else if s, ok := strings.CutPrefix(tail, "from "); ok {
		f.Module = s
	}
	return f, true
}

// skipParens returns what follows the balanced parenthesised list that s
// starts with, skipping quoted strings and characters inside it.
func skipParens(s string) string {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return s[i+1:]
			}
		}
	}
	return ""
}

// moduleBase is the file name of a native frame's module.
func moduleBase(m string) string {
	return filepath.Base(m)
}
