package sshclient

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// A gorun built with cgo (what `make build` makes, for NVML) is linked
// dynamically against glibc and runs only where glibc is at least as new as
// the newest GLIBC_x.y symbol version it was linked against; a static
// build (CGO_ENABLED=0) runs anywhere. Stage compares the two before it
// copies a dynamic build to a host.

// GlibcError means that a host cannot run a binary linked against glibc:
// its glibc is older than the binary needs, or it lacks the binary's
// dynamic loader (a musl system, say). Stage returns it, wrapped in a
// *HostError, instead of copying such a binary; errors.As finds it.
type GlibcError struct {
	// Need is the newest glibc version the binary needs, such as "2.34".
	Need string
	// Have is the host's glibc version, such as "2.28", or "" when it is
	// unknown.
	Have string
	// Loader is the binary's dynamic loader when the host lacks it, such
	// as "/lib64/ld-linux-x86-64.so.2"; "" when it is there (or unchecked).
	Loader string
	// Missing is the GLIBC_ version that the host's dynamic loader said
	// its C library lacks when it refused the binary, such as "2.34"; ""
	// when no loader said so.
	Missing string
}

// Error says what the host has and what gorun needs.
func (e *GlibcError) Error() string {
	if e.Loader != "" {
		return fmt.Sprintf("it has no %s, the dynamic loader of the glibc %s or newer that this gorun needs (not a glibc system?)", e.Loader, e.Need)
	}
	have := "unknown"
	if e.Have != "" {
		have = e.Have
	}
	var missing string
	if e.Missing != "" {
		missing = fmt.Sprintf(" (its loader found no GLIBC_%s)", e.Missing)
	}
	return fmt.Sprintf("its glibc is %s%s; this gorun needs glibc %s or newer", have, missing, e.Need)
}

// GlibcNeeds reads the ELF file at path and returns the newest glibc
// version it needs (the highest GLIBC_x.y among the symbol versions it
// needs from its libraries, such as "2.34") and its dynamic loader (the
// PT_INTERP path). Both are "" for a static binary and for a file that is
// not ELF: such a file needs no glibc.
func GlibcNeeds(path string) (version, loader string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return "", "", nil // not ELF
		}
		return "", "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", "", fmt.Errorf("read the dynamic loader's name in %s: %w", path, err)
		}
		loader = strings.TrimRight(string(b), "\x00")
	}
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		if f.Section(".gnu.version_r") == nil {
			return "", loader, nil // no symbol versions: nothing to compare
		}
		return "", "", fmt.Errorf("read the symbol versions %s needs: %w", path, err)
	}
	var newest []int
	for _, n := range needs {
		for _, d := range n.Needs {
			name, ok := strings.CutPrefix(d.Dep, "GLIBC_")
			if !ok {
				continue
			}
			if v, ok := parseVersion(name); ok && (newest == nil || compareVersions(v, newest) > 0) {
				newest, version = v, name
			}
		}
	}
	return version, loader, nil
}

// glibcVersion returns the version in the output of `getconf
// GNU_LIBC_VERSION` ("glibc 2.36"), or "" if it is not that.
func glibcVersion(getconf string) string {
	f := strings.Fields(getconf)
	if len(f) != 2 || f[0] != "glibc" {
		return ""
	}
	if _, ok := parseVersion(f[1]); !ok {
		return ""
	}
	return f[1]
}

// loaderMissing matches glibc's dynamic loader refusing a binary:
// "prog: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found
// (required by prog)".
var loaderMissing = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("version [`']GLIBC_([0-9]+(?:\\.[0-9]+)*)' not found")
})

// MissingGlibc returns the version that a line of glibc's dynamic loader
// says the C library lacks, such as "2.34" from "prog: /lib64/libc.so.6:
// version `GLIBC_2.34' not found (required by prog)", and whether the line
// says so.
func MissingGlibc(line string) (string, bool) {
	m := loaderMissing().FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// OlderGlibc reports whether glibc version have ("2.28") is older than
// need ("2.34"). It is false when either is not a version.
func OlderGlibc(have, need string) bool {
	h, ok1 := parseVersion(have)
	n, ok2 := parseVersion(need)
	return ok1 && ok2 && compareVersions(h, n) < 0
}

// parseVersion parses a dotted version of decimal numbers, "2" to "2.3.4".
func parseVersion(s string) ([]int, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return nil, false
	}
	v := make([]int, len(parts))
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return nil, false
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		v[i] = n
	}
	return v, true
}

// compareVersions compares two parsed versions part by part, a missing
// part counting as 0 (2.34 = 2.34.0): -1, 0 or +1.
func compareVersions(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}
