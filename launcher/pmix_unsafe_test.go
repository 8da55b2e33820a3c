package launcher

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/plugins"
)

// The agent never runs a gorun-pmix that others could have written (here
// in a directory that anyone can write): it refuses it, naming the file
// and why, while one in a sound directory is started (it is not a real
// plugin, so the handshake fails after it ran).
func TestPMIxPluginUnsafe(t *testing.T) {
	root := t.TempDir()
	launch := control.Launch{JobID: "t", WorldSize: 1, PMI: control.PMI{PMIx: PMIxOn, Mapping: "(vector,(0,1,1))", Hosts: []string{"h1"}}}
	for _, tc := range []struct {
		dir  string
		mode os.FileMode
		says string // the error says it; "" for a plugin that may run
	}{
		{"open", 0o777, "writable by others"},
		{"sound", 0o755, ""},
	} {
		dir := filepath.Join(root, tc.dir)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, tc.mode)
		marker := filepath.Join(root, tc.dir+".ran")
		plug := filepath.Join(dir, "gorun-pmix")
		if err := os.WriteFile(plug, []byte("#!/bin/sh\nid > "+marker+"\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv(PMIxPluginEnv, plug)
		_, err := (&agent{}).startPMIx(launch, "/bin/true")
		t.Logf("%s: %v", tc.dir, err)
		_, ran := os.Stat(marker)
		if tc.says == "" {
			if err == nil || ran != nil || strings.Contains(err.Error(), "refusing") {
				t.Errorf("%s: %v (marker: %v), want a failed handshake after the plugin ran", tc.dir, err, ran)
			}
			continue
		}
		if ran == nil {
			t.Errorf("%s: gorun-pmix ran", tc.dir)
		}
		if err == nil || !strings.Contains(err.Error(), plug) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", tc.dir, err, plug, tc.says)
		}
	}
}

// The key of an agent started by srun is among the variables that no
// plugin gets (plugins cannot import this package to read the name).
func TestPluginsGetNoAgentKey(t *testing.T) {
	if !slices.Contains(plugins.SecretEnv, AgentKeyEnv) {
		t.Errorf("plugins.SecretEnv %q lacks %s", plugins.SecretEnv, AgentKeyEnv)
	}
}
