package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// syntaxError reports a TOML syntax error without repeating its line number;
// it unwraps to the toml.ParseError.
type syntaxError struct{ pe toml.ParseError }

func (e syntaxError) Error() string { return "invalid TOML: " + e.pe.Message }
func (e syntaxError) Unwrap() error { return e.pe }

// parseFile decodes a file's text into its top-level values and finds the
// line of each top-level key.
func parseFile(path, text string) (map[string]any, map[string]int, error) {
	vals := map[string]any{}
	if _, err := toml.Decode(text, &vals); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("%s:%d: %w", path, pe.Position.Line, syntaxError{pe})
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	lines := make(map[string]int, len(vals))
	for key := range vals {
		lines[key] = keyLine(text, key)
	}
	return vals, lines, nil
}

// keysByLine returns the keys of vals sorted by line, then name.
func keysByLine(vals map[string]any, lines map[string]int) []string {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if lines[a] != lines[b] {
			return lines[a] - lines[b]
		}
		return strings.Compare(a, b)
	})
	return keys
}

// keyLine finds the line (from 1) where the top-level key is defined, by
// scanning the text: "key =" or "key.sub =" (key bare or quoted) before the
// first table header, or a table header "[key]", "[key.sub]" or "[[key]]".
// It returns 0 if none is found. This is good enough for flat files; BurntSushi
// does not expose key positions.
func keyLine(text, key string) int {
	inTable := false
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimLeft(line, " \t\ufeff")
		if rest, ok := strings.CutPrefix(line, "["); ok {
			inTable = true
			rest = strings.TrimPrefix(rest, "[")
			if matchKey(strings.TrimLeft(rest, " \t"), key, "].") {
				return i + 1
			}
			continue
		}
		if !inTable && matchKey(line, key, "=.") {
			return i + 1
		}
	}
	return 0
}

// matchKey reports whether s starts with key (bare, "quoted" or 'quoted')
// followed by optional blanks and one of the bytes in next.
func matchKey(s, key, next string) bool {
	for _, form := range [...]string{key, `"` + key + `"`, "'" + key + "'"} {
		if rest, ok := strings.CutPrefix(s, form); ok {
			rest = strings.TrimLeft(rest, " \t")
			if rest != "" && strings.IndexByte(next, rest[0]) >= 0 {
				return true
			}
		}
	}
	return false
}
