package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gorun/gorun/env"
)

// pluginSettings reads and checks the plugin flags (see pluginFlags).
func pluginSettings(get func(string) string, list func(string) []string) (env.Plugin, error) {
	p, err := pluginFlags(get("plugin"), list("plugin-dir"), list("plugin-opt"), get("fabric-provider"), get("transport-fallback"))
	if err != nil {
		return p, err
	}
	if p.Device = get("device"); strings.ContainsRune(p.Device, '/') {
		abs, err := filepath.Abs(p.Device)
		if err != nil {
			return p, fmt.Errorf("--device %s: %w", p.Device, err)
		}
		p.Device = abs
	}
	return p, nil
}

// pluginFlags checks gorun's plugin flags and returns the settings they
// make, which env.WithPlugin passes to the ranks: a name that is a path
// and the directories become absolute (ranks run elsewhere), options must
// be key=value (several may share one value, comma-separated), the fabric
// provider becomes the option provider, and the only fallback is tcp,
// which needs a plugin. Its errors name the flag.
func pluginFlags(name string, dirs, opts []string, provider, fallback string) (env.Plugin, error) {
	p := env.Plugin{Name: name, Fallback: fallback}
	if strings.ContainsRune(p.Name, '/') {
		abs, err := filepath.Abs(p.Name)
		if err != nil {
			return p, fmt.Errorf("--plugin %s: %w", p.Name, err)
		}
		p.Name = abs
	}
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return p, fmt.Errorf("--plugin-dir %s: %w", d, err)
		}
		p.Dirs = append(p.Dirs, abs)
	}
	for _, o := range opts {
		if _, err := env.ParsePluginOpts(o); err != nil {
			return p, fmt.Errorf("--plugin-opt: %w", err)
		}
		p.Options = append(p.Options, strings.Split(o, ",")...)
	}
	if provider != "" {
		if strings.ContainsRune(provider, ',') {
			return p, fmt.Errorf("--fabric-provider %q: one provider", provider)
		}
		p.Options = append(p.Options, "provider="+provider)
	}
	switch p.Fallback {
	case "", "tcp":
	default:
		return p, fmt.Errorf("--transport-fallback %q: the only fallback is tcp", p.Fallback)
	}
	if p.Fallback != "" && p.Name == "" {
		return p, fmt.Errorf("--transport-fallback %s: there is no --plugin to fall back from", p.Fallback)
	}
	return p, nil
}
