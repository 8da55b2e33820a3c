package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func FuzzLoad(f *testing.F) {
	for _, name := range []string{"good.toml", "seconds.toml", "syntax.toml", "unknown.toml", "table.toml", "bad_duration.toml"} {
		data, err := os.ReadFile(td(name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("x = \"\\u0000\\u007f\"\ngrace-period = 1e300\n")
	f.Add("grace-period = -9223372036\nhostfile = \"\\\"\"\n")
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(t.TempDir(), "fuzz.toml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(testSchema, []string{path}, nil, nil)
		if err != nil {
			return
		}
		for _, s := range c.Settings() {
			if s.Key.Kind == StringList {
				continue
			}
			if len(s.Values) != 1 {
				t.Fatalf("%s: %d values", s.Key.Name, len(s.Values))
			}
			again, err := parseText(s.Key.Kind, s.Values[0], false)
			if err != nil || !slices.Equal(again, s.Values) {
				t.Fatalf("%s: %q re-parses as %q, %v", s.Key.Name, s.Values, again, err)
			}
		}
		assertRoundTrip(t, c)
	})
}
