package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testusers"
	"github.com/gorun/gorun/plugins/internal/wire"
)

// The attacks of security review rows 7a and 7b on the plugin host, by a
// real second user. (cmd/gorun's tests run `gorun plugins list` as a
// victim that is not root; here the victim is the test's own user.)

// markerPlugin writes at path a plugin that records its run in marker
// (id > marker) and exits, with mode and owner uid:gid.
func markerPlugin(t *testing.T, path, marker string, mode os.FileMode, uid, gid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\nid > "+marker+"\nexit 1\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// A plugin that someone else could have written or could replace is never
// run: not by Lookup's users (Open), not by Start, not by List (gorun
// plugins list), which shows it with the reason instead.
func TestUnsafePluginNotRun(t *testing.T) {
	attacker := testusers.Create(t, "gplug")
	root := t.TempDir()
	marks := testusers.Dir(t, filepath.Join(root, "marks"), os.ModeSticky|0o777)
	cases := []struct {
		name   string
		dir    string      // the plugin directory, made with dirMode
		mode   os.FileMode // the plugin's
		theirs bool        // the plugin is the attacker's
		says   []string    // the refusal says these
	}{
		{"the attacker's plugin in a 1777 directory", "drop", 0o755, true, []string{"drop", "writable by others", "sticky"}},
		{"a plugin of another user's", "team", 0o755, true, []string{"gorun-plugin-x", "owned by user " + attacker.Name}},
		{"a group-writable plugin", "mine", 0o775, false, []string{"gorun-plugin-x", "writable by its group"}},
		{"the user's own plugin in a 1777 directory", "shared", 0o755, false, []string{"shared", "writable by others", "sticky"}},
	}
	dirMode := map[string]os.FileMode{"drop": os.ModeSticky | 0o777, "team": 0o755, "mine": 0o755, "shared": os.ModeSticky | 0o777}
	for _, tc := range cases {
		t.Run(tc.dir, func(t *testing.T) {
			dir := testusers.Dir(t, filepath.Join(root, tc.dir), dirMode[tc.dir])
			plugin := filepath.Join(dir, BinaryPrefix+"x")
			marker := filepath.Join(marks, tc.dir)
			uid, gid := os.Getuid(), os.Getgid()
			if tc.theirs {
				uid, gid = int(attacker.UID), int(attacker.GID)
			}
			markerPlugin(t, plugin, marker, tc.mode, uid, gid)
			refused := func(how string, err error) {
				t.Helper()
				if err == nil {
					t.Errorf("%s: no error", how)
					return
				}
				msg := err.Error()
				for _, w := range append([]string{plugin}, tc.says...) {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: %q does not say %q", how, msg, w)
					}
				}
			}
			_, err := Lookup("x", []string{dir})
			t.Log(err)
			refused("Lookup", err)
			_, err = Open(Options{Name: "x", Dirs: []string{dir}, Rank: -1, Size: -1, LocalRank: -1, StartTimeout: 5 * time.Second})
			refused("Open", err)
			_, err = Start(Spec{Name: "x", Path: plugin, Handshake: wire.Handshake, VersionedPlugins: wire.PluginSets(nil), DispenseName: wire.PluginName, StartTimeout: 5 * time.Second})
			refused("Start", err)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ls := List(ctx, []string{dir}, Options{StartTimeout: 5 * time.Second})
			if len(ls) != 1 || ls[0].Path != plugin || !strings.Contains(ls[0].Problem, tc.says[len(tc.says)-1]) {
				t.Errorf("List = %+v, want %s with a problem that says %q", ls, plugin, tc.says[len(tc.says)-1])
			}
			var out strings.Builder
			WriteListing(&out, []string{dir}, ls)
			if !strings.Contains(out.String(), plugin) || !strings.Contains(out.String(), tc.says[len(tc.says)-1]) {
				t.Errorf("the listing does not say why:\n%s", out.String())
			}
			if b, err := os.ReadFile(marker); err == nil {
				t.Errorf("the plugin ran: %s", strings.TrimSpace(string(b)))
			}
		})
	}
}

// A plugin does not inherit the job's secret, an agent's key or the
// user's ssh-agent from the rank (or agent) that starts it.
func TestPluginEnvWithoutSecrets(t *testing.T) {
	secrets := map[string]string{
		"GORUN_JOB_SECRET": "job-secret-0123456789abcdef",
		"GORUN_AGENT_KEY":  "agent-key-0123456789abcdef",
		"SSH_AUTH_SOCK":    "/tmp/ssh-agent.sock",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("GORUN_RANK", "3")
	dir := t.TempDir()
	dump := filepath.Join(dir, "env")
	plugin := filepath.Join(dir, BinaryPrefix+"envdump")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\nenv > "+dump+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	Open(Options{Name: "envdump", Dirs: []string{dir}, Rank: 0, Size: 1, LocalRank: 0, StartTimeout: 5 * time.Second})
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatalf("the plugin did not run: %v", err)
	}
	env := string(b)
	if !strings.Contains(env, "GORUN_RANK=3\n") {
		t.Fatalf("the plugin's environment lacks the rank's own variables:\n%s", env)
	}
	for k, v := range secrets {
		if strings.Contains(env, k+"=") || strings.Contains(env, v) {
			t.Errorf("the plugin got %s", k)
		}
	}
}
