package hostfile

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// ParseSequenceFile reads the hostfile at path with [ParseSequence],
// naming path in errors.
func ParseSequenceFile(path string) ([]RankSlot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	defer f.Close()
	return ParseSequence(f, path)
}

// ParseSequence reads a hostfile from r as Open MPI's sequential mapper
// (rmaps seq) reads it: rank N on the host of the file's N-th host line
// (from 0), one rank a line whatever its slots, a host on several lines
// once for each. The lines are [Parse]'s, and checked as it checks them;
// the ranks carry no slot: they are bound as the job's binding says.
func ParseSequence(r io.Reader, name string) ([]RankSlot, error) {
	if name == "" {
		name = defaultName
	}
	var out []RankSlot
	err := readLines(r, name, func(n int, line string) error {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.Trim(line, blanks)
		if line == "" {
			return nil
		}
		h, err := parseLine(line)
		if err == nil && len(out) >= maxHosts {
			err = errorf("more than %d lines", maxHosts)
		}
		if err != nil {
			return &LineError{File: name, Line: n, Text: line, Err: err}
		}
		out = append(out, RankSlot{Rank: len(out), Host: h.Name, Relative: -1, Line: n})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &LineError{File: name, Err: errorf("no hosts")}
	}
	return out, nil
}
