package hostfile

import (
	"fmt"
	"os"
	"strings"
)

// ParsePBSNodefile reads a PBS or Torque node file (the file PBS_NODEFILE
// names): one host name per line, one line per slot. A host gets one slot per
// line naming it, in the position of its first line; blank lines are skipped.
// A file with no host is an error.
func ParsePBSNodefile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	defer f.Close()
	m := newMerger("line")
	err = readLines(f, path, func(n int, line string) error {
		line = strings.Trim(line, blanks)
		if line == "" {
			return nil
		}
		name := line
		if addr, rest, isV6, err := splitIPv6(line); isV6 {
			if err == nil && rest != "" {
				err = errorf("unexpected %q after IPv6 address", rest)
			}
			if err != nil {
				return &LineError{File: path, Line: n, Text: line, Err: err}
			}
			name = addr
		} else if err := checkName(name); err != nil {
			return &LineError{File: path, Line: n, Text: line, Err: err}
		}
		if err := m.add(Host{Name: name, Slots: 1}, n); err != nil {
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
