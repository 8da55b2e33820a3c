package stacks

import (
	"strconv"
	"strings"
)

// ParseGo parses the goroutines of a Go program's runtime.Stack(buf,
// true) (or of its crash or SIGQUIT dump), one Thread a goroutine:
//
//	goroutine 20 [sync.Mutex.Lock, 2 minutes]:
//	sync.(*Mutex).Lock(...)
//		/usr/local/go/src/sync/mutex.go:46
//	main.locker(...)
//		/tmp/main.go:12
//	created by main.main in goroutine 1
//		/tmp/main.go:19 +0xd6
//
// ID is the goroutine's number, Main marks goroutine 1, Name is what it
// waits for ("chan receive", "select", "running"), without how long or
// "locked to thread". Frames are named as Go names functions
// ("sync.(*Mutex).Lock", "main.main.func1"), their Module is the
// function's package path; "created by" is not a frame.
func ParseGo(dump []byte) []Thread {
	var out []Thread
	var cur *Thread
	skipFile := false
	for line := range strings.Lines(string(dump)) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "goroutine "):
			t, ok := parseGoroutine(line)
			if !ok {
				cur = nil
				continue
			}
			out = append(out, t)
			cur = &out[len(out)-1]
		case cur == nil || line == "":
		case strings.HasPrefix(line, "\t"):
			if !skipFile && len(cur.Frames) > 0 {
				f := &cur.Frames[len(cur.Frames)-1]
				loc, _, _ := strings.Cut(strings.TrimSpace(line), " +0x")
				f.File, f.Line = splitFileLine(loc)
			}
			skipFile = false
		case strings.HasPrefix(line, "created by "), strings.HasPrefix(line, "..."):
			skipFile = true
		default:
			name := line
			if i := strings.LastIndexByte(line, '('); i > 0 && strings.HasSuffix(line, ")") {
				name = line[:i]
			}
			cur.Frames = append(cur.Frames, Frame{Func: name, Module: goPackage(name)})
			skipFile = false
		}
	}
	return out
}

// parseGoroutine parses "goroutine N [reason, 3 minutes]:", with the
// gp=... m=... fields that GOTRACEBACK=system adds.
func parseGoroutine(line string) (Thread, bool) {
	rest := strings.TrimPrefix(line, "goroutine ")
	num, rest, _ := strings.Cut(rest, " ")
	id, err := strconv.ParseInt(num, 10, 64)
	if err != nil || !strings.HasSuffix(rest, "]:") {
		return Thread{}, false
	}
	_, reason, _ := strings.Cut(strings.TrimSuffix(rest, "]:"), "[")
	reason, _, _ = strings.Cut(reason, ",")
	return Thread{ID: id, Name: reason, Main: id == 1}, true
}

// goPackage is the package path of a Go function's name:
// "github.com/a/b.(*T).M" is in "github.com/a/b", "main.main.func1" in
// "main".
func goPackage(fn string) string {
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return ""
	}
	return fn[:slash+1+dot]
}

// goStdlib reports whether a Go package is the standard library's: no
// dot in its path's first element.
func goStdlib(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return pkg != "" && pkg != "main" && !strings.Contains(first, ".")
}
