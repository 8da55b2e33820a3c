package hostfile

import (
	"fmt"
	"os"
	"strings"
)

// ParsePBSNodefile reads a PBS or Torque node file (the file PBS_NODEFILE
// names): one host name per line, one line per slot. A host gets one slot per
// line naming it, in the position of its first line; blank lines are skipped.
// A file with no host is an error. LSF's LSB_DJOB_HOSTFILE has the same form.
func ParsePBSNodefile(path string) ([]Host, error) {
	return parseHostLines(path, func(line string) (Host, bool, error) {
		line = strings.Trim(line, blanks)
		if line == "" {
			return Host{}, false, nil
		}
		name := line
		if addr, rest, isV6, err := splitIPv6(line); isV6 {
			if err == nil && rest != "" {
				err = errorf("unexpected %q after IPv6 address", rest)
			}
			if err != nil {
				return Host{}, false, err
			}
			name = addr
		} else if err := checkName(name); err != nil {
			return Host{}, false, err
		}
		return Host{Name: name, Slots: 1}, true, nil
	})
}

// parseHostLines reads the file at path line by line: parse turns a line
// into a host (ok false: a line to skip), and a host named again gets the
// slots of both. An error names the file, the line and its text; a file
// with no host is an error.
func parseHostLines(path string, parse func(line string) (h Host, ok bool, err error)) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	defer f.Close()
	m := newMerger("line")
	err = readLines(f, path, func(n int, line string) error {
		h, ok, err := parse(line)
		if err == nil && ok {
			err = m.add(h, n)
		}
		if err != nil {
			return &LineError{File: path, Line: n, Text: line, Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(m.hosts) == 0 {
		return nil, &LineError{File: path, Err: errorf("no hosts")}
	}
	return m.hosts, nil
}
