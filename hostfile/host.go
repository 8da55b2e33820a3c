package hostfile

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Limits on the inputs the parsers accept.
const (
	maxLineLen     = 4096      // bytes in one line of a file, newline excluded
	maxHosts       = 100000    // distinct hosts in one result
	maxCount       = 1000000   // any slot, task, repeat or index number; total slots of one host
	maxExpand      = 1000000   // names one expansion may produce
	maxExpandBytes = 64 << 20  // bytes of names one expansion may produce, counting each at its longest
	maxNameLen     = 255       // bytes in a host name
	maxUserLen     = 255       // bytes in a user name
	maxDigits      = 18        // digits in a number inside a bracket range
	maxPort        = 65535     // highest ssh port
	textLimit      = 64        // bytes of an over-long line quoted in an error
	hostListTag    = "-H"      // LineError.File of ParseHostList errors
	defaultName    = "<input>" // LineError.File when Parse is given no name
)

// ErrSyntax is wrapped by every error that reports malformed or out-of-bounds
// input, so errors.Is(err, ErrSyntax) tells a user's mistake from an I/O
// error.
var ErrSyntax = errors.New("hostfile syntax error")

// syntaxError is a message that wraps ErrSyntax without repeating its text.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }
func (e *syntaxError) Unwrap() error { return ErrSyntax }

// errorf returns a formatted error that wraps ErrSyntax.
func errorf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...)}
}

// LineError is a syntax error at one line of a host source.
//
// For a file, Error reads
//
//	hostfile hosts:3: bad slots value "x" in "node1 slots=x"
//
// (file:line, the problem, the offending text). For a -H host list File is
// "-H", Line is the 1-based item number and Error reads
//
//	-H item 2 "b:x": bad slots value "x"
type LineError struct {
	File string // file name, or "-H" for a -H host list
	Line int    // 1-based line (or -H item) number; 0 when the error concerns the whole source
	Text string // the offending line or item, comments and surrounding blanks removed
	Err  error  // what is wrong; wraps ErrSyntax for syntax errors
}

// Error returns the error with file, line and text, as described on [LineError].
func (e *LineError) Error() string {
	if e.File == hostListTag {
		if e.Line == 0 {
			return fmt.Sprintf("-H: %v", e.Err)
		}
		return fmt.Sprintf("-H item %d %q: %v", e.Line, e.Text, e.Err)
	}
	var b strings.Builder
	b.WriteString("hostfile ")
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Text != "" {
		fmt.Fprintf(&b, " in %q", e.Text)
	}
	return b.String()
}

// Unwrap returns e.Err.
func (e *LineError) Unwrap() error { return e.Err }

// Host is one host of a job and what it offers.
type Host struct {
	Name     string // host name or address as written (after user@, :N and IPv6 brackets are split off)
	Slots    int    // ranks it takes before it counts as oversubscribed; >= 1
	MaxSlots int    // hard cap on ranks even with oversubscription; 0 = no cap
	User     string // login user, "" = default
	Port     int    // ssh port, 0 = default
	GPUs     []int  // GPU slot indices selected by a DeepSpeed include/exclude filter; nil = all
}

// String returns h as one line of an Open MPI style hostfile, which
// [Parse] reads back to the same Host (GPUs excepted: a hostfile has no
// syntax for them and String leaves them out):
//
//	[user@]name slots=N [max_slots=M] [port=P]
//
// An IPv6 address is written in brackets, as in "[fe80::1] slots=2".
func (h Host) String() string {
	var b strings.Builder
	if h.User != "" {
		b.WriteString(h.User)
		b.WriteByte('@')
	}
	if strings.Contains(h.Name, ":") {
		b.WriteByte('[')
		b.WriteString(h.Name)
		b.WriteByte(']')
	} else {
		b.WriteString(h.Name)
	}
	b.WriteString(" slots=")
	b.WriteString(strconv.Itoa(h.Slots))
	if h.MaxSlots != 0 {
		b.WriteString(" max_slots=")
		b.WriteString(strconv.Itoa(h.MaxSlots))
	}
	if h.Port != 0 {
		b.WriteString(" port=")
		b.WriteString(strconv.Itoa(h.Port))
	}
	return b.String()
}

// Total returns the sum of the Slots of hosts.
func Total(hosts []Host) int {
	n := 0
	for _, h := range hosts {
		n += h.Slots
	}
	return n
}

// isNameByte reports whether c may appear in a host or user name.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_'
}

// checkWord checks a host or user name made of name bytes. A leading '-'
// is refused so that a name can never be taken for an ssh option.
func checkWord(what, s string, limit int) error {
	switch {
	case s == "":
		return errorf("empty %s", what)
	case len(s) > limit:
		return errorf("%s longer than %d bytes", what, limit)
	case s[0] == '-':
		return errorf("bad %s %q: starts with '-'", what, s)
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return errorf("bad %s %q: character %q not allowed", what, s, s[i])
		}
	}
	return nil
}

// checkName checks a host name as stored in Host.Name: letters, digits,
// '-', '.', '_' (which covers IPv4 addresses), or an IPv6 address, written
// without brackets, whose optional zone uses the same characters.
func checkName(s string) error {
	if !strings.Contains(s, ":") {
		return checkWord("host name", s, maxNameLen)
	}
	if len(s) > maxNameLen {
		return errorf("host name longer than %d bytes", maxNameLen)
	}
	addr, err := netip.ParseAddr(s)
	if err != nil || !addr.Is6() {
		return errorf("bad IPv6 address %q", s)
	}
	if _, zone, ok := strings.Cut(s, "%"); ok {
		if err := checkWord("IPv6 zone", zone, maxNameLen); err != nil {
			return err
		}
	}
	return nil
}

// checkUser checks a login user name.
func checkUser(s string) error { return checkWord("user name", s, maxUserLen) }

// splitUser splits "user@rest" into its parts; user is "" without '@'.
func splitUser(s string) (user, rest string, err error) {
	u, r, ok := strings.Cut(s, "@")
	if !ok {
		return "", s, nil
	}
	if strings.Contains(r, "@") {
		return "", "", errorf("bad host %q: more than one '@'", s)
	}
	if err := checkUser(u); err != nil {
		return "", "", err
	}
	return u, r, nil
}

// splitIPv6 splits "[addr]rest" when s starts with a bracketed IPv6 address
// (brackets holding a ':'). ok is false when s does not start that way.
func splitIPv6(s string) (addr, rest string, ok bool, err error) {
	if !strings.HasPrefix(s, "[") {
		return "", s, false, nil
	}
	end := strings.IndexByte(s, ']')
	if end < 0 || !strings.Contains(s[1:end], ":") {
		return "", s, false, nil
	}
	addr = s[1:end]
	if err := checkName(addr); err != nil {
		return "", "", true, err
	}
	return addr, s[end+1:], true, nil
}

// parseCount parses a decimal number in [lo, hi] made of ASCII digits only.
func parseCount(what, s string, lo, hi int) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, errorf("bad %s value %q", what, s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errorf("bad %s value %q", what, s)
		}
		n = n*10 + int(c-'0')
	}
	if n < lo || n > hi {
		return 0, errorf("%s value %q out of range %d-%d", what, s, lo, hi)
	}
	return n, nil
}
