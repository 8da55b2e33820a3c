package env

import (
	"reflect"
	"strings"
	"testing"
)

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

// The device plugin reaches the ranks as GORUN_COLL_DEVICE, unless -x set it.
func TestWithPluginDevice(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		exports []Export
		want    string
	}{
		{nil, "cuda"},
		{[]Export{{Name: CollDevice, Value: "other", HasValue: true}}, "other"},
	} {
		vars, _ := Resolve(WithPlugin(tc.exports, Plugin{Device: "cuda"}, none), nil)
		got := ""
		for _, x := range vars {
			if k, v, _ := strings.Cut(x, "="); k == CollDevice {
				got = v
			}
		}
		if got != tc.want {
			t.Errorf("exports %v: %s=%q, want %q", tc.exports, CollDevice, got, tc.want)
		}
	}
}
