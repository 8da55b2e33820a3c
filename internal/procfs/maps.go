// This file holds the parser of /proc/PID/maps.

package procfs

import (
	"iter"
	"os"
	"strconv"
	"strings"
)

// Dev is a device number as /proc/PID/maps prints it (major:minor in hex)
// and statx(2) gives it.
type Dev struct{ Major, Minor uint32 }

// Mapping is a mapping of a file into a process's memory.
type Mapping struct {
	Dev   Dev    // the device of the mapped file
	Inode uint64 // the mapped file's inode on Dev; never 0
	// Path is the file's path as the kernel last knew it, " (deleted)"
	// appended when it has been unlinked since. It may hold spaces.
	Path string
	// Start and End are the mapping's addresses: it covers [Start, End).
	Start, End uint64
}

// ParseMaps yields the file mappings of a /proc/PID/maps file, in its
// order. Anonymous mappings (inode 0: the heap, the stack, [vdso]...) and
// lines that do not parse are skipped.
func ParseMaps(b []byte) iter.Seq[Mapping] {
	return func(yield func(Mapping) bool) {
		for line := range strings.Lines(string(b)) {
			if m, ok := parseMapping(strings.TrimSuffix(line, "\n")); ok && !yield(m) {
				return
			}
		}
	}
}

// parseMapping parses one line of a maps file: address perms offset dev
// inode [path], the path after padding.
func parseMapping(line string) (Mapping, bool) {
	var field [5]string
	rest := line
	for i := range field {
		field[i], rest, _ = strings.Cut(strings.TrimLeft(rest, " "), " ")
	}
	if field[4] == "0" {
		return Mapping{}, false
	}
	maj, min, ok := strings.Cut(field[3], ":")
	major, err1 := strconv.ParseUint(maj, 16, 32)
	minor, err2 := strconv.ParseUint(min, 16, 32)
	ino, err3 := strconv.ParseUint(field[4], 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		return Mapping{}, false
	}
	lo, hi, _ := strings.Cut(field[0], "-")
	start, _ := strconv.ParseUint(lo, 16, 64)
	end, _ := strconv.ParseUint(hi, 16, 64)
	return Mapping{Dev: Dev{uint32(major), uint32(minor)}, Inode: ino, Path: strings.TrimLeft(rest, " "), Start: start, End: end}, true
}

// FileMappings yields the file mappings of process pid (see [ParseMaps]);
// nothing when pid is gone or may not be read (another user's process, or
// one made undumpable).
func (fs FS) FileMappings(pid int) iter.Seq[Mapping] {
	b, err := os.ReadFile(fs.path(pidDir(pid), "maps"))
	if err != nil {
		return func(func(Mapping) bool) {}
	}
	return ParseMaps(b)
}
