package hostfile

import (
	"fmt"
	"os"
	"strings"
)

// ParsePEHostfile reads a Grid Engine parallel environment's host file
// (the file PE_HOSTFILE names in a job of a parallel environment): one line
// per host, "host slots queue processors" (node01 4 all.q@node01
// UNDEFINED). The queue and processors fields are not used. A host named
// on several lines (queues of one host) gets their slots together.
func ParsePEHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	defer f.Close()
	m := newMerger("line")
	err = readLines(f, path, func(n int, line string) error {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return nil
		}
		if len(fields) < 2 {
			return &LineError{File: path, Line: n, Text: line, Err: errorf("want \"host slots queue processors\"")}
		}
		if err := checkName(fields[0]); err != nil {
			return &LineError{File: path, Line: n, Text: line, Err: err}
		}
		slots, err := parseCount("slot count", fields[1], 1, maxCount)
		if err == nil {
			err = m.add(Host{Name: fields[0], Slots: slots}, n)
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

// FromLSFHosts reads LSF's LSB_MCPU_HOSTS: host names each followed by its
// slots, blank-separated ("node01 4 node02 4"). A host named twice gets
// the slots of both.
func FromLSFHosts(s string) ([]Host, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("hostfile: LSB_MCPU_HOSTS %q: %w", s, errorf("no hosts"))
	}
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("hostfile: LSB_MCPU_HOSTS %q: %w", s, errorf("want pairs of host and slots, found %d words", len(fields)))
	}
	m := newMerger("pair")
	for i := 0; i < len(fields); i += 2 {
		if err := checkName(fields[i]); err != nil {
			return nil, fmt.Errorf("hostfile: LSB_MCPU_HOSTS %q: %w", s, err)
		}
		slots, err := parseCount("slot count", fields[i+1], 1, maxCount)
		if err != nil {
			return nil, fmt.Errorf("hostfile: LSB_MCPU_HOSTS %q: host %s: %w", s, fields[i], err)
		}
		if err := m.add(Host{Name: fields[i], Slots: slots}, i/2+1); err != nil {
			return nil, fmt.Errorf("hostfile: LSB_MCPU_HOSTS %q: %w", s, err)
		}
	}
	return m.hosts, nil
}
