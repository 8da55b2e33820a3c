package hostfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// blanks are the characters that separate fields of a line.
const blanks = " \t\r\v\f"

// ParseFile reads the hostfile at path and parses it with [Parse], naming
// path in errors.
func ParseFile(path string) ([]Host, error) { return parseFile(path, "hostfile", Parse) }

// parseFile opens path and reads it with parse, naming path in errors;
// kind ("hostfile", "rankfile") names the file when it cannot be opened.
func parseFile[T any](path, kind string, parse func(io.Reader, string) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var none T
		return none, fmt.Errorf("%s: %w", kind, err)
	}
	defer f.Close()
	return parse(f, path)
}

// Parse reads a hostfile from r; name stands for the source in errors.
//
// Each line holds one host, either Open MPI style
//
//	[user@]host [slots=N] [max_slots=M] [port=P]
//
// or MPICH style "host:N" (N slots), which may also carry the keys above
// except slots. A bare host has 1 slot. '#' starts a comment; blank lines are
// ignored. An IPv6 address is written in brackets: "[::1]:2". A host on
// several lines has the sum of their slots, in the position of its first
// line; its lines must agree on user, port and max_slots. A source with no
// host is an error.
func Parse(r io.Reader, name string) ([]Host, error) {
	if name == "" {
		name = defaultName
	}
	m := newMerger("line")
	if err := eachHost(r, name, func(n int, h Host) error { return m.add(h, n) }); err != nil {
		return nil, err
	}
	if len(m.hosts) == 0 {
		return nil, &LineError{File: name, Err: errorf("no hosts")}
	}
	return m.hosts, nil
}

// eachEntry calls fn with each line of r that holds something, and its
// number: '#' starts a comment, and blanks around the rest are trimmed.
func eachEntry(r io.Reader, name string, fn func(n int, line string) error) error {
	return readLines(r, name, func(n int, line string) error {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.Trim(line, blanks)
		if line == "" {
			return nil
		}
		return fn(n, line)
	})
}

// eachHost calls fn with the host of each hostfile line of r (see Parse)
// and its number; a line that does not parse, or that fn refuses, is a
// *LineError.
func eachHost(r io.Reader, name string, fn func(n int, h Host) error) error {
	return eachEntry(r, name, func(n int, line string) error {
		h, err := parseLine(line)
		if err == nil {
			err = fn(n, h)
		}
		if err != nil {
			return &LineError{File: name, Line: n, Text: line, Err: err}
		}
		return nil
	})
}

// readLines calls fn with each line of r (newline removed, UTF-8 BOM removed
// from the first) and its 1-based number. A line longer than maxLineLen
// bytes is an error. Read errors are wrapped with name.
func readLines(r io.Reader, name string, fn func(n int, line string) error) error {
	br := bufio.NewReaderSize(r, 2*maxLineLen)
	for n := 1; ; n++ {
		b, err := br.ReadSlice('\n')
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("hostfile %s: %w", name, err)
		}
		line := bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
		}
		if len(line) > maxLineLen || errors.Is(err, bufio.ErrBufferFull) {
			return &LineError{File: name, Line: n, Text: string(line[:textLimit]) + "...",
				Err: errorf("line longer than %d bytes", maxLineLen)}
		}
		if len(b) > 0 || err == nil {
			if ferr := fn(n, string(line)); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			return nil // io.EOF
		}
	}
}

// parseLine parses one non-blank hostfile line with comments removed.
func parseLine(line string) (Host, error) {
	fields := strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(blanks, r) })
	spec := fields[0]
	if key, _, ok := strings.Cut(spec, "="); ok && !strings.ContainsAny(key, ":@[") {
		return Host{}, errorf("missing host name before %q", spec)
	}
	h, haveSlots, err := parseHostSpec(spec)
	if err != nil {
		return Host{}, err
	}
	seen := make(map[string]bool)
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return Host{}, errorf("unexpected %q after host (want key=value)", f)
		}
		if seen[key] || key == "slots" && haveSlots {
			return Host{}, errorf("%s given twice", key)
		}
		seen[key] = true
		switch key {
		case "slots":
			h.Slots, err = parseCount("slots", val, 1, maxCount)
		case "max_slots":
			h.MaxSlots, err = parseCount("max_slots", val, 1, maxCount)
		case "port":
			h.Port, err = parseCount("port", val, 1, maxPort)
		default:
			err = errorf("unknown key %q (want slots, max_slots or port)", key)
		}
		if err != nil {
			return Host{}, err
		}
	}
	if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
		return Host{}, errorf("max_slots=%d less than slots=%d", h.MaxSlots, h.Slots)
	}
	return h, nil
}

// parseHostSpec parses "[user@]host[:N]" or "[user@][ipv6][:N]" of a
// hostfile line. haveSlots reports whether ":N" was given; Slots is 1
// otherwise.
func parseHostSpec(spec string) (h Host, haveSlots bool, err error) {
	h.User, spec, err = splitUser(spec)
	if err != nil {
		return Host{}, false, err
	}
	addr, rest, isV6, err := splitIPv6(spec)
	if err != nil {
		return Host{}, false, err
	}
	var slots string
	if isV6 {
		h.Name = addr
		if rest != "" {
			var ok bool
			if slots, ok = strings.CutPrefix(rest, ":"); !ok {
				return Host{}, false, errorf("unexpected %q after IPv6 address", rest)
			}
			haveSlots = true
		}
	} else {
		h.Name, slots, haveSlots = strings.Cut(spec, ":")
		if err := checkName(h.Name); err != nil {
			return Host{}, false, err
		}
	}
	h.Slots = 1
	if haveSlots {
		if h.Slots, err = parseCount("slots", slots, 1, maxCount); err != nil {
			return Host{}, false, err
		}
	}
	return h, haveSlots, nil
}
