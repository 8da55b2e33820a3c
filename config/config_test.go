package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

var testSchema = Schema{
	{Name: "np", Kind: Int, Default: "1", Usage: "number of processes"},
	{Name: "tag-output", Kind: Bool, Default: "false", Usage: "prefix output lines with the rank"},
	{Name: "grace-period", Kind: Duration, Default: "5s", Usage: "time between SIGTERM and SIGKILL"},
	{Name: "timeout", Kind: Duration, Default: "0", Usage: "job time limit"},
	{Name: "hostfile", Kind: String, Usage: "file listing hosts"},
	{Name: "x", Kind: StringList, Usage: "environment variables to export"},
}

func td(name string) string { return filepath.Join("testdata", name) }

// values returns every setting as name -> values.
func values(c *Config) map[string][]string {
	m := map[string][]string{}
	for _, s := range c.Settings() {
		m[s.Key.Name] = s.Values
	}
	return m
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, want string }{
		{"np", "GORUN_NP"},
		{"grace-period", "GORUN_GRACE_PERIOD"},
		{"tag-output", "GORUN_TAG_OUTPUT"},
		{"x", "GORUN_X"},
	} {
		if got := EnvName(tc.key); got != tc.want {
			t.Errorf("EnvName(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestDefaultFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, xdg, home string
		want            []string
	}{
		{"home", "", "/home/u", []string{"/etc/gorun/config.toml", "/home/u/.config/gorun/config.toml", "gorun.toml"}},
		{"xdg", "/xdg", "/home/u", []string{"/etc/gorun/config.toml", "/xdg/gorun/config.toml", "gorun.toml"}},
		{"relative xdg ignored", "rel", "/home/u", []string{"/etc/gorun/config.toml", "/home/u/.config/gorun/config.toml", "gorun.toml"}},
		{"no home", "", "", []string{"/etc/gorun/config.toml", "gorun.toml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := defaultFiles(tc.xdg, tc.home); !slices.Equal(got, tc.want) {
				t.Errorf("defaultFiles(%q, %q) = %q, want %q", tc.xdg, tc.home, got, tc.want)
			}
		})
	}
	if got := DefaultFiles(); len(got) < 2 || got[0] != "/etc/gorun/config.toml" || got[len(got)-1] != "gorun.toml" {
		t.Errorf("DefaultFiles() = %q", got)
	}
}

func TestSourceString(t *testing.T) {
	t.Parallel()
	home, err := os.UserHomeDir()
	if err != nil || home == "/" {
		home = ""
	}
	tests := []struct {
		src  Source
		want string
	}{
		{Source{}, "default"},
		{Source{Kind: FromFile, File: "/etc/gorun/config.toml", Line: 3}, "/etc/gorun/config.toml:3"},
		{Source{Kind: FromFile, File: "gorun.toml"}, "gorun.toml"},
		{Source{Kind: FromEnv, EnvVar: "GORUN_GRACE_PERIOD"}, "env GORUN_GRACE_PERIOD"},
		{Source{Kind: FromFlag, Flag: "grace-period"}, "flag --grace-period"},
	}
	if home != "" {
		tests = append(tests, struct {
			src  Source
			want string
		}{Source{Kind: FromFile, File: filepath.Join(home, ".config/gorun/config.toml"), Line: 3}, "~/.config/gorun/config.toml:3"})
	}
	for _, tc := range tests {
		if got := tc.src.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestLoadGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		files   []string
		environ []string
		flags   map[string][]string
		want    map[string][]string
		sources map[string]string
	}{
		{
			name: "defaults",
			want: map[string][]string{
				"np": {"1"}, "tag-output": {"false"}, "grace-period": {"5s"},
				"timeout": {"0s"}, "hostfile": {""}, "x": {},
			},
			sources: map[string]string{"np": "default", "x": "default"},
		},
		{
			name:  "missing files are skipped",
			files: []string{td("does-not-exist.toml"), td("good.toml/not-a-dir.toml")},
			want:  map[string][]string{"np": {"1"}},
		},
		{
			name:  "every kind",
			files: []string{td("good.toml")},
			want: map[string][]string{
				"np": {"4"}, "tag-output": {"true"}, "grace-period": {"1m30s"},
				"hostfile": {"hosts"}, "x": {"FOO", "BAR=1"}, "timeout": {"0s"},
			},
			sources: map[string]string{
				"np": td("good.toml") + ":2", "tag-output": td("good.toml") + ":3",
				"grace-period": td("good.toml") + ":4", "hostfile": td("good.toml") + ":5",
				"x": td("good.toml") + ":6", "timeout": "default",
			},
		},
		{
			name:  "numbers of seconds and single-string list",
			files: []string{td("seconds.toml")},
			want:  map[string][]string{"grace-period": {"2.5s"}, "timeout": {"10s"}, "x": {"ONE"}},
		},
		{
			name:  "later file wins",
			files: []string{td("system.toml"), td("user.toml")},
			want: map[string][]string{
				"np": {"8"}, "grace-period": {"3s"}, "hostfile": {"/etc/hosts.gorun"}, "tag-output": {"true"},
			},
			sources: map[string]string{
				"np": td("user.toml") + ":3", "grace-period": td("user.toml") + ":4",
				"hostfile": td("system.toml") + ":3", "tag-output": td("system.toml") + ":4",
			},
		},
		{
			name:    "precedence: files < env < flag",
			files:   []string{td("system.toml"), td("user.toml")},
			environ: []string{"PATH=/bin", "GORUN_NP=16", "GORUN_GRACE_PERIOD=1m", "GORUN_RANK=3", "GORUN_JOB_ID=x", "GORUN_X=A=1, B ,,C"},
			flags:   map[string][]string{"np": {"32", "64"}, "x": {"D,E"}},
			want: map[string][]string{
				"np": {"64"}, "grace-period": {"1m0s"}, "hostfile": {"/etc/hosts.gorun"},
				"tag-output": {"true"}, "x": {"D,E"},
			},
			sources: map[string]string{
				"np": "flag --np", "grace-period": "env GORUN_GRACE_PERIOD",
				"hostfile": td("system.toml") + ":3", "x": "flag --x",
			},
		},
		{
			name:    "env forms",
			environ: []string{"GORUN_TAG_OUTPUT=1", "GORUN_TIMEOUT=90", "GORUN_X=A=1, B ,,C", "GORUN_HOSTFILE=", "GORUN_NP=2", "GORUN_NP=3"},
			want: map[string][]string{
				"tag-output": {"true"}, "timeout": {"1m30s"}, "x": {"A=1", "B", "C"}, "hostfile": {""}, "np": {"3"},
			},
			sources: map[string]string{"hostfile": "env GORUN_HOSTFILE", "np": "env GORUN_NP"},
		},
		{
			name:  "empty list flag",
			flags: map[string][]string{"x": {}, "tag-output": {"true"}},
			want:  map[string][]string{"x": {}, "tag-output": {"true"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(testSchema, tc.files, tc.environ, tc.flags)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := values(c)
			for k, want := range tc.want {
				if !slices.Equal(got[k], want) {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
			for k, want := range tc.sources {
				s, ok := c.Get(k)
				if !ok {
					t.Fatalf("Get(%q) not found", k)
				}
				if s.Source.String() != want {
					t.Errorf("%s source = %q, want %q", k, s.Source, want)
				}
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		files   []string
		environ []string
		flags   map[string][]string
		is      error
		want    []string // substrings of the message
	}{
		{"syntax error", []string{td("syntax.toml")}, nil, nil, nil,
			[]string{td("syntax.toml") + ":2: invalid TOML"}},
		{"unknown key with underscore", []string{td("unknown.toml")}, nil, nil, ErrUnknownKey,
			[]string{td("unknown.toml") + `:3: unknown key "grace_period" (did you mean "grace-period"?)`}},
		{"unknown key typo", []string{td("typo.toml")}, nil, nil, ErrUnknownKey,
			[]string{td("typo.toml") + `:2: unknown key "hostfle" (did you mean "hostfile"?)`}},
		{"unknown key no suggestion", []string{td("far.toml")}, nil, nil, ErrUnknownKey,
			[]string{td("far.toml") + `:1: unknown key "verbose-mode"`}},
		{"table", []string{td("table.toml")}, nil, nil, ErrUnknownKey,
			[]string{td("table.toml") + `:3: unknown key "launcher"`}},
		{"dotted key", []string{td("dotted.toml")}, nil, nil, ErrBadValue,
			[]string{td("dotted.toml") + `:1: np: invalid value table`}},
		{"bad duration", []string{td("bad_duration.toml")}, nil, nil, ErrBadValue,
			[]string{td("bad_duration.toml") + `:2: grace-period: invalid value string "5 parsecs": expected a duration`}},
		{"string for int", []string{td("wrong_type.toml")}, nil, nil, ErrBadValue,
			[]string{td("wrong_type.toml") + `:1: np: invalid value string "4": expected an integer`}},
		{"float for int", []string{td("float_int.toml")}, nil, nil, ErrBadValue,
			[]string{td("float_int.toml") + `:1: np: invalid value float 4.5: expected an integer`}},
		{"string for bool", []string{td("bool_string.toml")}, nil, nil, ErrBadValue,
			[]string{td("bool_string.toml") + `:1: tag-output: invalid value string "yes": expected a boolean`}},
		{"mixed list", []string{td("list_mixed.toml")}, nil, nil, ErrBadValue,
			[]string{td("list_mixed.toml") + `:1: x: invalid value array (element integer 1 is not a string)`}},
		{"unreadable file", []string{"testdata"}, nil, nil, nil,
			[]string{"testdata: read testdata"}},
		{"bad env", nil, []string{"GORUN_NP=four", "GORUN_TAG_OUTPUT=yes please", "GORUN_GRACE_PERIOD="}, nil, ErrBadValue,
			[]string{`env GORUN_NP: invalid value "four": expected an integer`,
				`env GORUN_TAG_OUTPUT: invalid value "yes please"`,
				`env GORUN_GRACE_PERIOD: invalid value ""`}},
		{"bad flag", nil, nil, map[string][]string{"grace-period": {"soon"}}, ErrBadValue,
			[]string{`flag --grace-period: invalid value "soon"`}},
		{"flag without value", nil, nil, map[string][]string{"np": {}}, ErrBadValue,
			[]string{`flag --np: invalid value: no value given`}},
		{"unknown flag", nil, nil, map[string][]string{"nope": {"1"}}, ErrUnknownKey,
			[]string{`flag --nope: unknown key`}},
		{"errors from several sources", []string{td("typo.toml"), td("bad_duration.toml")}, []string{"GORUN_NP=x"}, nil, ErrUnknownKey,
			[]string{td("typo.toml") + ":2", td("bad_duration.toml") + ":2", "env GORUN_NP"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(testSchema, tc.files, tc.environ, tc.flags)
			if err == nil {
				t.Fatalf("Load succeeded: %v", values(c))
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSyntaxErrorUnwraps(t *testing.T) {
	t.Parallel()
	_, err := Load(testSchema, []string{td("syntax.toml")}, nil, nil)
	var pe toml.ParseError
	if !errors.As(err, &pe) || pe.Position.Line != 2 {
		t.Fatalf("error %v: not a toml.ParseError at line 2", err)
	}
}

func TestBadSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		schema Schema
	}{
		{"empty name", Schema{{Kind: Int}}},
		{"duplicate", Schema{{Name: "np", Kind: Int, Default: "1"}, {Name: "np", Kind: Int, Default: "1"}}},
		{"same env var", Schema{{Name: "a-b", Kind: String}, {Name: "a_b", Kind: String}}},
		{"bad kind", Schema{{Name: "a", Kind: Kind(42)}}},
		{"bad default", Schema{{Name: "np", Kind: Int, Default: "many"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Load(tc.schema, nil, nil, nil); err == nil {
				t.Error("Load succeeded")
			}
		})
	}
}

func TestGetReturnsCopy(t *testing.T) {
	t.Parallel()
	c, err := Load(testSchema, []string{td("good.toml")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Get("x")
	s.Values[0] = "changed"
	if s2, _ := c.Get("x"); s2.Values[0] != "FOO" {
		t.Errorf("Get returned shared slice")
	}
	if _, ok := c.Get("nope"); ok {
		t.Errorf("Get(nope) found")
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	c, err := Load(testSchema, []string{td("system.toml"), td("user.toml")},
		[]string{"GORUN_X=A, \"q\"\\\t"}, map[string][]string{"timeout": {"90"}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := c.Format(&b); err != nil {
		t.Fatal(err)
	}
	want := `# read testdata/system.toml
# read testdata/user.toml
np = 8  # testdata/user.toml:3
tag-output = true  # testdata/system.toml:4
grace-period = "3s"  # testdata/user.toml:4
timeout = "1m30s"  # flag --timeout
hostfile = "/etc/hosts.gorun"  # testdata/system.toml:3
x = ["A", "\"q\"\\"]  # env GORUN_X
`
	want = strings.ReplaceAll(want, "testdata/", filepath.FromSlash("testdata/"))
	if b.String() != want {
		t.Errorf("Format:\n%s\nwant:\n%s", b.String(), want)
	}
	assertRoundTrip(t, c)
	if got, want := c.Files(), []string{td("system.toml"), td("user.toml")}; !reflect.DeepEqual(got, want) {
		t.Errorf("Files() = %q, want %q", got, want)
	}
}

// Files and Format name only the files that were there; with none, Format
// says where it looked.
func TestFilesRead(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "gorun.toml")
	c, err := Load(testSchema, []string{missing, td("user.toml")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Files(); !reflect.DeepEqual(got, []string{td("user.toml")}) {
		t.Errorf("Files() = %q, want only %s", got, td("user.toml"))
	}
	c, err = Load(testSchema, []string{missing}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := c.Format(&b); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(b.String(), "\n"); first != "# no configuration file (looked for "+missing+")" {
		t.Errorf("Format's first line with no file: %q", first)
	}
	if len(c.Files()) != 0 {
		t.Errorf("Files() = %q, want none", c.Files())
	}
}

// assertRoundTrip checks that Format's output loads back to the same values.
func assertRoundTrip(t *testing.T, c *Config) {
	t.Helper()
	var b strings.Builder
	if err := c.Format(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "formatted.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	c2, err := Load(testSchema, []string{path}, nil, nil)
	if err != nil {
		t.Fatalf("loading Format output %q: %v", b.String(), err)
	}
	if got, want := values(c2), values(c); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: got %q, want %q", got, want)
	}
}
