package launcher

import (
	"debug/elf"
	"encoding/binary"
	"os"
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
