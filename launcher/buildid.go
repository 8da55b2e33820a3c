package launcher

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

var (
	buildIDOnce sync.Once
	buildID     string
)

// selfBuildID returns the Go build id of gorun's own executable (a hash of
// what went into it, which the Go linker writes in an ELF note), or "" if
// it cannot be read. Agents announce theirs in the control preamble, so
// that the head knows, without hashing any file, whether the gorun on a
// host is its own.
func selfBuildID() string {
	buildIDOnce.Do(func() {
		exe, err := os.Executable()
		if err == nil {
			buildID = fileBuildID(exe)
		}
	})
	return buildID
}

// fileBuildID reads the Go build id note of an ELF file.
func fileBuildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return ""
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		return ""
	}
	namesz := binary.LittleEndian.Uint32(b[0:])
	descsz := binary.LittleEndian.Uint32(b[4:])
	off := 12 + (namesz+3)&^3
	if uint64(off)+uint64(descsz) > uint64(len(b)) || string(b[12:12+min(namesz, 2)]) != "Go" {
		return ""
	}
	return string(b[off : off+descsz])
}

// SameBuild returns nil when the Go program at path was built from the
// same source as this gorun, with the same Go, for the same platform, as
// its build information says (Go writes it into every binary, and reads it
// without running the program): gorun and its companions are different
// programs, so their build ids differ, but they must be of one build. It
// compares the main module's version (from version control: the commit,
// and "+dirty" for uncommitted changes), the commit and its time, whether
// the tree had changes, the Go version, GOOS and GOARCH, and the version of
// every module both link; not cgo or build tags, which change no protocol
// between them. Two builds of one commit with different uncommitted changes
// look the same to it: build them together (make build does). The error
// names the first difference.
func SameBuild(path string) error {
	other, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: not a Go program: %w", path, err)
	}
	self, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("%s: this gorun has no build information to compare it with", path)
	}
	if d := buildDiff(self, other); d != "" {
		return fmt.Errorf("%s is another build than this gorun: %s", path, d)
	}
	return nil
}

// buildDiff says how build b differs from a, this gorun's, or "" when it
// does not (see SameBuild).
func buildDiff(a, b *debug.BuildInfo) string {
	type field struct{ name, a, b string }
	fields := []field{
		{"Go", a.GoVersion, b.GoVersion},
		{"module", a.Main.Path, b.Main.Path},
		{"version", a.Main.Version, b.Main.Version},
	}
	for _, key := range []string{"GOOS", "GOARCH", "vcs.revision", "vcs.time", "vcs.modified"} {
		fields = append(fields, field{key, setting(a, key), setting(b, key)})
	}
	for _, f := range fields {
		if f.a != f.b {
			return fmt.Sprintf("%s %s, this gorun's %s", f.name, orNone(f.b), orNone(f.a))
		}
	}
	mine := map[string]*debug.Module{}
	for _, m := range a.Deps {
		mine[m.Path] = used(m)
	}
	for _, m := range b.Deps {
		if am, ok := mine[m.Path]; ok && *am != *used(m) {
			return fmt.Sprintf("%s %s, this gorun's %s", m.Path, used(m).Version, am.Version)
		}
	}
	return ""
}

// setting returns the value of a build setting, or "".
func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// used is the module that a build used for dependency m: its replacement,
// where go.mod replaced it.
func used(m *debug.Module) *debug.Module {
	if m.Replace != nil {
		return m.Replace
	}
	return m
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
