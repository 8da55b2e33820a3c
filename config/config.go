package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/editdist"
)

// ErrUnknownKey is wrapped by errors about a key that is not in the schema.
var ErrUnknownKey = errors.New("unknown key")

// ErrBadValue is wrapped by errors about a value of the wrong type or one
// that cannot be parsed.
var ErrBadValue = errors.New("invalid value")

// Kind is the type of a setting's value.
type Kind int

// The kinds of setting.
const (
	Bool       Kind = iota // true or false
	Int                    // a decimal integer
	Duration               // a Go duration such as "1m30s", or a number of seconds
	String                 // any text
	StringList             // a list of strings
)

// String returns the kind's name, e.g. "duration".
func (k Kind) String() string {
	switch k {
	case Bool:
		return "bool"
	case Int:
		return "int"
	case Duration:
		return "duration"
	case String:
		return "string"
	case StringList:
		return "string list"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// expected describes the values a kind accepts, for error messages.
func (k Kind) expected() string {
	switch k {
	case Bool:
		return "a boolean (true or false)"
	case Int:
		return "an integer"
	case Duration:
		return `a duration such as "5s" or "1m30s", or a number of seconds`
	case String:
		return "a string"
	case StringList:
		return "an array of strings or a single string"
	}
	return k.String()
}

// Key describes one setting. Its Name is the long flag name, e.g.
// "grace-period". Default is the default value as text, parsed like an
// environment variable's value (a StringList default is comma-separated; ""
// is the empty list).
type Key struct {
	Name    string
	Kind    Kind
	Default string
	Usage   string
}

// Schema lists the settings gorun knows, in display order.
type Schema []Key

// SourceKind tells which kind of source a value came from.
type SourceKind int

// The kinds of source, from lowest to highest precedence.
const (
	FromDefault SourceKind = iota
	FromFile
	FromEnv
	FromFlag
)

// Source tells where a setting's value came from.
type Source struct {
	Kind   SourceKind
	File   string // FromFile: the file's path as given to Load
	Line   int    // FromFile: the key's line, starting at 1; 0 if unknown
	EnvVar string // FromEnv: the variable's name, e.g. "GORUN_NP"
	Flag   string // FromFlag: the flag's name without dashes, e.g. "np"
}

// String returns the source as shown to users: "default",
// "/etc/gorun/config.toml:3" (with the home directory abbreviated to "~"),
// "env GORUN_GRACE_PERIOD" or "flag --grace-period".
func (s Source) String() string {
	switch s.Kind {
	case FromDefault:
		return "default"
	case FromFile:
		f := abbrevHome(s.File)
		if s.Line > 0 {
			return f + ":" + strconv.Itoa(s.Line)
		}
		return f
	case FromEnv:
		return "env " + s.EnvVar
	case FromFlag:
		return "flag --" + s.Flag
	}
	return "SourceKind(" + strconv.Itoa(int(s.Kind)) + ")"
}

func abbrevHome(path string) string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" || home == string(filepath.Separator) {
		return path
	}
	if rest, ok := strings.CutPrefix(path, home+string(filepath.Separator)); ok {
		return "~" + string(filepath.Separator) + rest
	}
	return path
}

// Setting is one key's merged value. Values has exactly one element except
// for StringList keys, in canonical text form: durations as Go duration
// strings ("5s"), bools as "true" or "false", ints in decimal.
type Setting struct {
	Key    Key
	Values []string
	Source Source
}

// Config is the merged result of Load.
type Config struct {
	settings []Setting
	index    map[string]int
	looked   []string // the files Load was given
	read     []string // those it read: the ones that were there
}

// DefaultFiles returns the configuration files read by default, lowest
// precedence first: /etc/gorun/config.toml, $XDG_CONFIG_HOME/gorun/config.toml
// (or ~/.config/gorun/config.toml when XDG_CONFIG_HOME is unset or not
// absolute; left out when the home directory is unknown) and gorun.toml in
// the current directory.
func DefaultFiles() []string {
	home, _ := os.UserHomeDir()
	return defaultFiles(os.Getenv("XDG_CONFIG_HOME"), home)
}

func defaultFiles(xdg, home string) []string {
	files := []string{"/etc/gorun/config.toml"}
	switch {
	case xdg != "" && filepath.IsAbs(xdg):
		files = append(files, filepath.Join(xdg, "gorun", "config.toml"))
	case home != "":
		files = append(files, filepath.Join(home, ".config", "gorun", "config.toml"))
	}
	return append(files, "gorun.toml")
}

// EnvName returns the environment variable for a key: "GORUN_" followed by
// the name in upper case with '-' replaced by '_', e.g. "grace-period" ->
// "GORUN_GRACE_PERIOD".
func EnvName(key string) string {
	return "GORUN_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// Load merges the schema's defaults, the files (lowest precedence first;
// missing ones are skipped), the GORUN_* variables in environ ("NAME=value"
// pairs as from os.Environ; later duplicates win; variables not named after a
// schema key are ignored) and flags (key name -> values given on the command
// line; the last one counts except for StringList keys).
//
// All problems found are returned joined together; each names its source and
// wraps ErrUnknownKey, ErrBadValue, a toml.ParseError or an I/O error. A
// schema error (empty or duplicate name, bad default) is a programming error.
func Load(schema Schema, files []string, environ []string, flags map[string][]string) (*Config, error) {
	c := &Config{settings: make([]Setting, len(schema)), index: make(map[string]int, len(schema))}
	envs := make(map[string]bool, len(schema))
	for i, k := range schema {
		if k.Name == "" {
			return nil, fmt.Errorf("config: schema key %d has no name", i)
		}
		if _, dup := c.index[k.Name]; dup {
			return nil, fmt.Errorf("config: duplicate schema key %q", k.Name)
		}
		if envs[EnvName(k.Name)] {
			return nil, fmt.Errorf("config: schema key %q: environment variable %s used by another key", k.Name, EnvName(k.Name))
		}
		if k.Kind < Bool || k.Kind > StringList {
			return nil, fmt.Errorf("config: schema key %q: bad kind %d", k.Name, int(k.Kind))
		}
		envs[EnvName(k.Name)] = true
		vals, err := parseText(k.Kind, k.Default, true)
		if err != nil {
			return nil, fmt.Errorf("config: default for %q: %w %q: expected %s", k.Name, ErrBadValue, k.Default, k.Kind.expected())
		}
		c.index[k.Name] = i
		c.settings[i] = Setting{Key: k, Values: vals, Source: Source{Kind: FromDefault}}
	}

	var errs []error
	c.looked = slices.Clone(files)
	for _, f := range files {
		errs = append(errs, c.loadFile(schema, f)...)
	}
	errs = append(errs, c.loadEnv(environ)...)
	errs = append(errs, c.loadFlags(flags)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// loadFile reads one file; a missing file is skipped.
func (c *Config) loadFile(schema Schema, path string) []error {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return []error{fmt.Errorf("%s: %w", path, err)}
	}
	c.read = append(c.read, path)
	vals, lines, err := parseFile(path, string(data))
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, key := range keysByLine(vals, lines) {
		src := Source{Kind: FromFile, File: path, Line: lines[key]}
		i, ok := c.index[key]
		if !ok {
			errs = append(errs, unknownKey(src.String(), key, schema))
			continue
		}
		k := c.settings[i].Key
		v, err := fromTOML(k.Kind, vals[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w %s: expected %s", src, key, ErrBadValue, err, k.Kind.expected()))
			continue
		}
		c.settings[i].Values, c.settings[i].Source = v, src
	}
	return errs
}

func (c *Config) loadEnv(environ []string) []error {
	last := map[string]string{}
	for _, kv := range environ {
		if name, val, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, "GORUN_") {
			last[name] = val
		}
	}
	var errs []error
	for i := range c.settings {
		s := &c.settings[i]
		name := EnvName(s.Key.Name)
		val, ok := last[name]
		if !ok {
			continue
		}
		v, err := parseText(s.Key.Kind, val, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("env %s: %w %q: expected %s", name, ErrBadValue, val, s.Key.Kind.expected()))
			continue
		}
		s.Values, s.Source = v, Source{Kind: FromEnv, EnvVar: name}
	}
	return errs
}

func (c *Config) loadFlags(flags map[string][]string) []error {
	var errs []error
	var unknown []string
	for name := range flags {
		if _, ok := c.index[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		errs = append(errs, fmt.Errorf("flag --%s: %w (not in the schema)", name, ErrUnknownKey))
	}
	// In schema order, for deterministic errors.
	for i := range c.settings {
		s := &c.settings[i]
		given, ok := flags[s.Key.Name]
		if !ok {
			continue
		}
		var v []string
		if s.Key.Kind == StringList {
			v = append([]string{}, given...)
		} else if len(given) == 0 {
			errs = append(errs, fmt.Errorf("flag --%s: %w: no value given: expected %s", s.Key.Name, ErrBadValue, s.Key.Kind.expected()))
			continue
		} else {
			val := given[len(given)-1]
			var err error
			if v, err = parseText(s.Key.Kind, val, false); err != nil {
				errs = append(errs, fmt.Errorf("flag --%s: %w %q: expected %s", s.Key.Name, ErrBadValue, val, s.Key.Kind.expected()))
				continue
			}
		}
		s.Values, s.Source = v, Source{Kind: FromFlag, Flag: s.Key.Name}
	}
	return errs
}

// parseText parses a value given as text (default, environment variable or
// flag) into canonical form. With splitList, a StringList value is
// comma-separated with blanks around elements trimmed and empty elements
// dropped; otherwise it is one element.
func parseText(kind Kind, s string, splitList bool) ([]string, error) {
	switch kind {
	case Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, err
		}
		return []string{strconv.FormatBool(b)}, nil
	case Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, err
		}
		return []string{strconv.Itoa(n)}, nil
	case Duration:
		d, err := parseDuration(s)
		if err != nil {
			return nil, err
		}
		return []string{d.String()}, nil
	case String:
		return []string{s}, nil
	case StringList:
		if !splitList {
			return []string{s}, nil
		}
		out := []string{}
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("bad kind %d", int(kind))
}

// parseDuration accepts a Go duration or a number of seconds.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	f, ferr := strconv.ParseFloat(s, 64)
	if ferr != nil {
		return 0, err
	}
	return secondsToDuration(f)
}

func secondsToDuration(f float64) (time.Duration, error) {
	ns := math.Round(f * float64(time.Second))
	if math.IsNaN(ns) || ns >= math.MaxInt64 || ns < math.MinInt64 {
		return 0, fmt.Errorf("%v seconds is out of range", f)
	}
	return time.Duration(ns), nil
}

// fromTOML converts a decoded TOML value into canonical form; the error
// describes the value.
func fromTOML(kind Kind, v any) ([]string, error) {
	bad := fmt.Errorf("%s", describe(v))
	switch kind {
	case Bool:
		if b, ok := v.(bool); ok {
			return []string{strconv.FormatBool(b)}, nil
		}
	case Int:
		if n, ok := v.(int64); ok && int64(int(n)) == n {
			return []string{strconv.FormatInt(n, 10)}, nil
		}
	case Duration:
		var d time.Duration
		var err error
		switch v := v.(type) {
		case string:
			d, err = time.ParseDuration(v)
		case int64:
			if v > math.MaxInt64/int64(time.Second) || v < math.MinInt64/int64(time.Second) {
				err = fmt.Errorf("out of range")
			}
			d = time.Duration(v) * time.Second
		case float64:
			d, err = secondsToDuration(v)
		default:
			return nil, bad
		}
		if err != nil {
			return nil, bad
		}
		return []string{d.String()}, nil
	case String:
		if s, ok := v.(string); ok {
			return []string{s}, nil
		}
	case StringList:
		switch v := v.(type) {
		case string:
			return []string{v}, nil
		case []any:
			out := make([]string, 0, len(v))
			for _, e := range v {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%s (element %s is not a string)", describe(v), describe(e))
				}
				out = append(out, s)
			}
			return out, nil
		}
	}
	return nil, bad
}

// describe shows a decoded TOML value and its type for error messages.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return "string " + tomlString(v)
	case bool:
		return "boolean " + strconv.FormatBool(v)
	case int64:
		return "integer " + strconv.FormatInt(v, 10)
	case float64:
		return "float " + strconv.FormatFloat(v, 'g', -1, 64)
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	case fmt.Stringer:
		return "datetime " + v.String()
	}
	return fmt.Sprintf("%T", v)
}

// unknownKey returns an ErrUnknownKey error with a suggestion if a schema key
// is close.
func unknownKey(src, key string, schema Schema) error {
	if s := suggest(key, schema); s != "" {
		return fmt.Errorf("%s: %w %q (did you mean %q?)", src, ErrUnknownKey, key, s)
	}
	return fmt.Errorf("%s: %w %q", src, ErrUnknownKey, key)
}

func suggest(key string, schema Schema) string {
	names := make([]string, len(schema))
	for i, k := range schema {
		names[i] = k.Name
	}
	return Closest(key, names)
}

// Closest returns the name in names that word was probably meant to be, or
// "" if none is close: the name word becomes in lower case with '_' written
// '-' (gorun's names are lower-case and dashed), else the first name within
// an edit distance of 2. The config files' unknown keys and the command
// line's unknown flags are suggested this way.
func Closest(word string, names []string) string {
	norm := strings.ToLower(strings.ReplaceAll(word, "_", "-"))
	for _, n := range names {
		if n == norm {
			return n
		}
	}
	best, bestDist := "", 3
	for _, n := range names {
		if d := editdist.Distance(word, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// Get returns the setting for a key name, and whether the schema has it.
func (c *Config) Get(name string) (Setting, bool) {
	i, ok := c.index[name]
	if !ok {
		return Setting{}, false
	}
	return c.settings[i].clone(), true
}

// Settings returns every setting, in schema order.
func (c *Config) Settings() []Setting {
	out := make([]Setting, len(c.settings))
	for i, s := range c.settings {
		out[i] = s.clone()
	}
	return out
}

func (s Setting) clone() Setting {
	s.Values = append([]string{}, s.Values...)
	return s
}

// Files returns the configuration files that Load read, lowest precedence
// first: those of its files that were there.
func (c *Config) Files() []string { return slices.Clone(c.read) }

// Format writes the files read, each as a comment line ("# read
// ~/.config/gorun/config.toml"; "# no configuration file" and the files
// looked for when none was there), then every setting, in schema order, as
// a line of TOML with its source as a trailing comment, e.g.
//
//	grace-period = "5s"  # ~/.config/gorun/config.toml:3
//
// Settings still at their default are written too, with "# default". The
// output is a valid configuration file that Load reads back to the same
// values (durations are written as strings; invalid UTF-8 in a value is
// replaced by U+FFFD).
func (c *Config) Format(w io.Writer) error {
	var b strings.Builder
	for _, f := range c.read {
		b.WriteString("# read " + comment(abbrevHome(f)) + "\n")
	}
	if len(c.read) == 0 && len(c.looked) > 0 {
		looked := make([]string, len(c.looked))
		for i, f := range c.looked {
			looked[i] = abbrevHome(f)
		}
		b.WriteString("# no configuration file (looked for " + comment(strings.Join(looked, ", ")) + ")\n")
	}
	for _, s := range c.settings {
		b.WriteString(tomlKey(s.Key.Name))
		b.WriteString(" = ")
		switch s.Key.Kind {
		case Bool, Int:
			b.WriteString(s.Values[0])
		case StringList:
			b.WriteByte('[')
			for i, v := range s.Values {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(tomlString(v))
			}
			b.WriteByte(']')
		default:
			b.WriteString(tomlString(s.Values[0]))
		}
		b.WriteString("  # ")
		b.WriteString(comment(s.Source.String()))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// comment makes s safe in a TOML comment: control characters and invalid
// UTF-8 become '?'.
func comment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// tomlKey returns name as a bare TOML key when possible, else quoted.
func tomlKey(name string) string {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return tomlString(name)
		}
	}
	return name
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
