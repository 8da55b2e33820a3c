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
