package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
)

// The plugin flags become the settings the ranks get, or an error that
// names the flag.
func TestPluginFlags(t *testing.T) {
	abs, _ := filepath.Abs("lib/p")
	for _, tc := range []struct {
		name, provider, fallback string
		dirs, opts               []string
		want                     env.Plugin
		err                      string
	}{
		{name: "fabric", dirs: []string{"lib/p"}, opts: []string{"a=1,b=2", "c="}, provider: "tcp;ofi_rxm", fallback: "tcp",
			want: env.Plugin{Name: "fabric", Dirs: []string{abs}, Options: []string{"a=1", "b=2", "c=", "provider=tcp;ofi_rxm"}, Fallback: "tcp"}},
		{name: "lib/p", want: env.Plugin{Name: abs}},
		{name: "x", opts: []string{"novalue"}, err: "--plugin-opt"},
		{name: "x", opts: []string{"=v"}, err: "--plugin-opt"},
		{name: "x", provider: "a,b", err: "--fabric-provider"},
		{name: "x", fallback: "udp", err: "--transport-fallback"},
		{fallback: "tcp", err: "no --plugin"},
	} {
		got, err := pluginFlags(tc.name, tc.dirs, tc.opts, tc.provider, tc.fallback)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: error %v, want one about %s", tc, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("%+v: %+v, %v; want %+v", tc, got, err, tc.want)
		}
	}
}

// --device is passed on as given, or as an absolute path when it is one,
// beside the --plugin settings.
func TestDeviceFlag(t *testing.T) {
	abs, _ := filepath.Abs("lib/gorun-plugin-cuda")
	for _, tc := range []struct{ device, want string }{{"", ""}, {"cuda", "cuda"}, {"lib/gorun-plugin-cuda", abs}} {
		get := func(name string) string {
			if name == "device" {
				return tc.device
			}
			return ""
		}
		p, err := pluginSettings(get, func(string) []string { return nil })
		if err != nil || p.Device != tc.want {
			t.Errorf("--device %q: %+v, %v; want %q", tc.device, p, err, tc.want)
		}
	}
}
