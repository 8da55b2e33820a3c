package stacks

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// nframe is a frame as normalisation sees it.
type nframe struct {
	Frame
	lib  string // the library it is in; "" for the program's own code
	pass bool   // a pass-through frame: a decorator's wrapper
}

// Normalize returns the normalised form of a thread's frames (innermost
// first) in language lang, as the verdict compares ranks by: see the
// package documentation. The frames keep their files and lines; only
// Func is rewritten.
func Normalize(lang string, frames []Frame) []Frame {
	if lang != LangPython && lang != LangGo {
		frames = frames[:startupEnd(frames)]
	}
	var n []nframe
	for _, f := range frames {
		f.addr = 0
		nf, keep := classify(lang, f)
		if !keep {
			continue
		}
		// A frame that repeats the one it calls (gdb's inlined copies,
		// recursion) is one frame.
		if k := len(n); k > 0 && n[k-1].Func == nf.Func && n[k-1].lib == nf.lib {
			continue
		}
		n = append(n, nf)
	}
	var out []Frame // outermost first
	callerLib := ""
	for i := len(n) - 1; i >= 0; {
		f := n[i]
		if f.lib == "" {
			if !f.pass || i == 0 && len(out) == 0 {
				out = append(out, f.Frame)
			}
			callerLib = ""
			i--
			continue
		}
		j := i // the run of f's library is n[j..i]
		for j > 0 && n[j-1].lib == f.lib {
			j--
		}
		if callerLib == "" { // called by the program: keep its entry
			entry := -1
			for k := i; k >= j; k-- {
				if !n[k].pass {
					entry = k
					break
				}
			}
			if entry < 0 && j == 0 {
				entry = i
			}
			if entry >= 0 {
				out = append(out, n[entry].Frame)
			}
		}
		callerLib = f.lib
		i = j - 1
	}
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}

// classify cleans f's name and says which library it is in, whether it
// passes calls through, and whether it is kept at all (not a frame that
// every program or thread starts with).
func classify(lang string, f Frame) (nframe, bool) {
	n := nframe{Frame: f}
	switch lang {
	case LangPython:
		n.lib = f.Module
		if n.lib == "" {
			n.lib = pyModule(f.File)
		}
		if n.lib == "runpy" || n.lib == "threading" && (f.Func == "_bootstrap" || f.Func == "_bootstrap_inner" || f.Func == "run") {
			return n, false
		}
		n.pass = pyPassThrough[f.Func]
	case LangGo:
		pkg := goPackage(f.Func)
		if f.Func == "runtime.main" || f.Func == "runtime.goexit" {
			return n, false
		}
		switch {
		case goStdlib(pkg):
			n.lib = pkg
		case strings.HasPrefix(pkg, gorunModule+"/"):
			// gorun's collectives and rendezvous client are the
			// library the program called: one frame, its entry.
			n.lib = gorunModule
		}
	default:
		if nativeStart(f.Func) {
			return n, false
		}
		if sharedLib(f.Module) {
			n.lib = f.Module
		}
		n.Func = cleanNative(f.Func, f.Module)
		if n.Func == "??" && f.Module != "" {
			// No symbol (a stripped program): say whose code it is.
			n.Func = "?? in " + filepath.Base(f.Module)
		}
		if nativeStart(n.Func) {
			return n, false
		}
	}
	n.Func = cleanMPI(n.Func)
	return n, true
}

// gorunModule is gorun's module path, whose packages a Go rank calls as a
// library.
const gorunModule = "github.com/gorun/gorun"

// pyPassThrough are the names of the functions decorators wrap others in,
// which pass a call on: never a library's entry point.
var pyPassThrough = map[string]bool{
	"wrapper": true, "_wrapper": true, "wrapped": true, "_wrapped": true, "inner": true, "_inner": true,
	"_fn": true, "decorate_context": true, "decorated": true, "wrapper_func": true, "wrapped_func": true,
	"_wrapped_call_impl": true, "_call_impl": true, "new_func": true,
}

// nativeStart reports whether a native frame is one that every program or
// thread starts in.
func nativeStart(fn string) bool {
	switch fn {
	case "_start", "__libc_start_call_main", "start_thread", "clone", "clone3", "__clone", "__clone3", "__clone_internal":
		return true
	}
	return strings.HasPrefix(fn, "__libc_start_main")
}

// startupEnd returns how many of a native thread's frames (innermost
// first) are the thread's own, before its start-up: the frames from
// __libc_start_main (or __libc_start_call_main) outwards (the program's
// _start, named or not, a stripped program's too), and below them the run
// of frames that every thread starts in (nativeStart) or that are the C
// library's without a symbol. The C library's start-up under main
// (__libc_start_call_main) and under a thread's function (start_thread,
// clone3) is named only with its detached debug symbols (Debian's
// libc6-dbg): without them it is "??", which the verdict would otherwise
// show and compare. A thread that has no frame of its own keeps them all.
func startupEnd(frames []Frame) int {
	end := len(frames)
	if i := slices.IndexFunc(frames, func(f Frame) bool {
		return strings.HasPrefix(f.Func, "__libc_start_main") || f.Func == "__libc_start_call_main"
	}); i >= 0 {
		end = i
	}
	for end > 0 {
		f := frames[end-1]
		if fn := cleanNative(f.Func, f.Module); !nativeStart(f.Func) && !nativeStart(fn) && !(fn == "??" && libcModule(f.Module)) {
			return end
		}
		end--
	}
	return len(frames)
}

// sharedLib reports whether a native module is a shared library (not the
// program's executable, and known).
func sharedLib(module string) bool {
	base := filepath.Base(module)
	return module != "" && (strings.Contains(base, ".so") || strings.HasPrefix(base, "["))
}

// libcModule reports whether module is the C library's (or the threads
// library's or the dynamic loader's), whose internal names are prefixed.
func libcModule(module string) bool {
	base := filepath.Base(module)
	for _, p := range []string{"libc.so", "libc-", "libpthread", "ld-linux", "ld-musl", "libc.musl"} {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

var cloneSuffix = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\.(constprop|isra|part|cold|lto_priv|localalias|llvm)(\.[0-9]+)?$`)
})

// cleanNative strips what varies or says nothing from a native function's
// name: the symbol version (@@GLIBC_2.34, @plt), a C++ parameter list and
// const, GCC's clone suffixes (.isra.0, .constprop.1, .cold), and the C
// library's internal prefixes (__GI___libc_read is read,
// ___pthread_cond_wait pthread_cond_wait).
func cleanNative(fn, module string) string {
	if i := strings.IndexByte(fn, '@'); i > 0 {
		fn = fn[:i]
	}
	if i := strings.Index(fn, " [clone "); i > 0 {
		fn = fn[:i]
	}
	fn = strings.TrimSuffix(fn, " const")
	if strings.HasSuffix(fn, ")") && !strings.HasSuffix(fn, "operator()") {
		depth := 0
		for i := len(fn) - 1; i > 0; i-- {
			switch fn[i] {
			case ')':
				depth++
			case '(':
				depth--
			}
			if depth == 0 {
				fn = fn[:i]
				break
			}
		}
	}
	for cloneSuffix().MatchString(fn) {
		fn = cloneSuffix().ReplaceAllString(fn, "")
	}
	for _, p := range []string{"__GI___libc_", "__GI___", "__GI_", "__libc_"} {
		if s, ok := strings.CutPrefix(fn, p); ok && s != "" {
			fn = s
			break
		}
	}
	if libcModule(module) {
		if s := strings.TrimLeft(fn, "_"); s != "" {
			fn = s
		}
	}
	return fn
}

// cleanMPI names an MPI function by its MPI_ name rather than the
// profiling interface's PMPI_ one that MPICH and Open MPI define.
func cleanMPI(fn string) string {
	if s, ok := strings.CutPrefix(fn, "PMPI"); ok && (strings.HasPrefix(s, "_") || strings.HasPrefix(s, "X_")) {
		return "MPI" + s
	}
	return fn
}

// shortName is how a summary shows a normalised function: a Go function
// without its package path's directories.
func shortName(lang, fn string) string {
	if lang == LangGo {
		if i := strings.LastIndexByte(goPackage(fn), '/'); i >= 0 {
			return fn[i+1:]
		}
	}
	return fn
}
