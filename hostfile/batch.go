package hostfile

import (
	"fmt"
	"strings"
)

// ParsePEHostfile reads a Grid Engine parallel environment's host file
// (the file PE_HOSTFILE names in a job of a parallel environment): one line
// per host, "host slots queue processors" (node01 4 all.q@node01
// UNDEFINED). The queue and processors fields are not used. A host named
// on several lines (queues of one host) gets their slots together.
func ParsePEHostfile(path string) ([]Host, error) {
	return parseHostLines(path, func(line string) (Host, bool, error) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return Host{}, false, nil
		}
		if len(fields) < 2 {
			return Host{}, false, errorf("want \"host slots queue processors\"")
		}
		if err := checkName(fields[0]); err != nil {
			return Host{}, false, err
		}
		slots, err := parseCount("slot count", fields[1], 1, maxCount)
		if err != nil {
			return Host{}, false, err
		}
		return Host{Name: fields[0], Slots: slots}, true, nil
	})
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
