package env

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The plugin flags become the settings the ranks get, or an error that
// names the flag.
func TestNewPlugin(t *testing.T) {
	abs, _ := filepath.Abs("lib/p")
	for _, tc := range []struct {
		name, provider, fallback string
		dirs, opts               []string
		want                     Plugin
		err                      string
	}{
		{name: "fabric", dirs: []string{"lib/p"}, opts: []string{"a=1,b=2", "c="}, provider: "tcp;ofi_rxm", fallback: "tcp",
			want: Plugin{Name: "fabric", Dirs: []string{abs}, Options: []string{"a=1", "b=2", "c=", "provider=tcp;ofi_rxm"}, Fallback: "tcp"}},
		{name: "lib/p", want: Plugin{Name: abs}},
		{name: "x", opts: []string{"novalue"}, err: "--plugin-opt"},
		{name: "x", opts: []string{"=v"}, err: "--plugin-opt"},
		{name: "x", provider: "a,b", err: "--fabric-provider"},
		{name: "x", fallback: "udp", err: "--transport-fallback"},
		{fallback: "tcp", err: "no --plugin"},
	} {
		got, err := NewPlugin(tc.name, tc.dirs, tc.opts, tc.provider, tc.fallback)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: error %v, want one about %s", tc, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("%+v: %+v, %v; want %+v", tc, got, err, tc.want)
		}
	}
}

// What WithPlugin joins, ParsePluginOpts reads back.
func TestPluginOptsRoundTrip(t *testing.T) {
	vars, _ := Resolve(WithPlugin(nil, Plugin{Name: "f", Options: []string{"a=1", "provider=tcp;ofi_rxm"}}, func(string) (string, bool) { return "", false }), nil)
	var v string
	for _, x := range vars {
		if k, val, _ := strings.Cut(x, "="); k == PluginOpts {
			v = val
		}
	}
	got, err := ParsePluginOpts(v)
	if want := map[string]string{"a": "1", "provider": "tcp;ofi_rxm"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParsePluginOpts(%q) = %v, %v; want %v", v, got, err, want)
	}
	if _, err := ParsePluginOpts("a=1,b"); err == nil || !strings.Contains(err.Error(), PluginOpts) {
		t.Errorf("a bad option: %v", err)
	}
}
