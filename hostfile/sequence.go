package hostfile

import (
	"io"
)

// ParseSequenceFile reads the hostfile at path with [ParseSequence],
// naming path in errors.
func ParseSequenceFile(path string) ([]RankSlot, error) {
	return parseFile(path, "hostfile", ParseSequence)
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
	err := eachHost(r, name, func(n int, h Host) error {
		if len(out) >= maxHosts {
			return errorf("more than %d lines", maxHosts)
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
