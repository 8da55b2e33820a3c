package rendezvous

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// PMI-1 wire limits (pmi.md §2 and §3).
const (
	// PMIMaxLine is the longest line, newline included, that MPICH's client
	// can read; no reply may be longer. Requests up to this length are
	// accepted by default.
	PMIMaxLine = 1024
	// PMIMaxTokens is the most key=value tokens a PMI line may have.
	PMIMaxTokens = 64
	// PMIKVSNameMax, PMIKeyLenMax and PMIValLenMax are the limits gorun
	// announces in its get_maxes reply (Hydra's values).
	PMIKVSNameMax = 256
	PMIKeyLenMax  = 64
	PMIValLenMax  = 1024
)

// PMIMessage is one parsed PMI-1 line: its command (the value of cmd= or
// mcmd=) and its key=value arguments.
type PMIMessage struct {
	// Cmd is the command name, "init", "put", ... ("spawn" for mcmd=spawn).
	Cmd string
	// Multi is true for a line that started with mcmd= (a spawn block).
	Multi bool
	// Args holds every key=value token other than cmd/mcmd.
	Args map[string]string
}

// ErrPMISyntax is wrapped by every error of ParsePMILine.
var ErrPMISyntax = errors.New("pmi: malformed line")

// ParsePMILine parses one PMI-1 line (with or without its trailing newline):
// space-separated key=value tokens whose first is cmd= (or mcmd=). Values
// cannot contain spaces; empty values are allowed. It never panics.
func ParsePMILine(line string) (PMIMessage, error) {
	line = strings.TrimSuffix(line, "\n")
	if len(line) >= PMIMaxLine*64 {
		return PMIMessage{}, fmt.Errorf("%w: line of %d bytes", ErrPMISyntax, len(line))
	}
	if strings.ContainsAny(line, "\n\r\x00") {
		return PMIMessage{}, fmt.Errorf("%w: control character in line", ErrPMISyntax)
	}
	toks := strings.Fields(line)
	if len(toks) == 0 {
		return PMIMessage{}, fmt.Errorf("%w: empty line", ErrPMISyntax)
	}
	if len(toks) > PMIMaxTokens {
		return PMIMessage{}, fmt.Errorf("%w: %d tokens (limit %d)", ErrPMISyntax, len(toks), PMIMaxTokens)
	}
	m := PMIMessage{Args: map[string]string{}}
	for i, t := range toks {
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			return PMIMessage{}, fmt.Errorf("%w: token %q is not key=value", ErrPMISyntax, truncate(t, 40))
		}
		if i == 0 {
			switch k {
			case "cmd":
			case "mcmd":
				m.Multi = true
			default:
				return PMIMessage{}, fmt.Errorf("%w: first token %q is not cmd= or mcmd=", ErrPMISyntax, truncate(t, 40))
			}
			if v == "" || !isPMIName(v) {
				return PMIMessage{}, fmt.Errorf("%w: bad command name %q", ErrPMISyntax, truncate(v, 40))
			}
			m.Cmd = v
			continue
		}
		if _, dup := m.Args[k]; dup {
			return PMIMessage{}, fmt.Errorf("%w: key %q repeated", ErrPMISyntax, truncate(k, 40))
		}
		m.Args[k] = v
	}
	return m, nil
}

// isPMIName reports whether s may be a command name we echo back in a reply.
func isPMIName(s string) bool {
	if len(s) > 31 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Int returns the integer argument key.
func (m PMIMessage) Int(key string) (int, error) {
	v, ok := m.Args[key]
	if !ok {
		return 0, fmt.Errorf("%w: cmd=%s lacks %s=", ErrPMISyntax, m.Cmd, key)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%w: cmd=%s %s=%q is not an integer", ErrPMISyntax, m.Cmd, key, truncate(v, 40))
	}
	return n, nil
}

// formatPMI builds a reply line from cmd and alternating keys and values.
func formatPMI(cmd string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(cmd)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteByte(' ')
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(kv[i+1])
	}
	b.WriteByte('\n')
	return b.String()
}

// pmiToken makes text one PMI value of at most n bytes: spaces and
// control characters become underscores.
func pmiToken(text string, n int) string {
	b := []byte(truncate(text, n))
	for i, c := range b {
		if c <= ' ' || c == 0x7f {
			b[i] = '_'
		}
	}
	return string(b)
}

// pmiValueOK reports whether v can travel as a PMI value (no spaces or
// control characters that would break the line).
func pmiValueOK(v string) bool {
	for _, c := range []byte(v) {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
