package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testusers"
)

// Security review row 7a, as it was found: a victim who is not root runs
// `gorun plugins list` with a GORUN_PLUGIN_PATH that holds a shared 1777
// directory where an attacker put a plugin, a team directory with a
// plugin another user owns, and the victim's own directory with a plugin
// that its group may write. No plugin runs (none leaves its marker), and
// the listing names each file and says why it is refused.
func TestPluginsListUnsafeAsVictim(t *testing.T) {
	victim := testusers.Create(t, "gvictim")
	attacker := testusers.Create(t, "gattack")
	if err := buildShared(); err != nil { // a gorun the victim can run
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "gorun-7a-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := func(p string, mode os.FileMode, u *testusers.User) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if u != nil {
			os.Chown(p, int(u.UID), int(u.GID))
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir(base, 0o755, nil)
	marks := dir(filepath.Join(base, "marks"), os.ModeSticky|0o777, nil)
	script := func(name string) string { return "#!/bin/sh\nid > " + filepath.Join(marks, name) + "\nexit 1\n" }
	drop := dir(filepath.Join(base, "drop"), os.ModeSticky|0o777, nil)
	team := dir(filepath.Join(base, "team"), 0o755, nil)
	own := dir(filepath.Join(victim.Home, "plugins"), 0o755, victim)

	// The attacker's plugin, written by the attacker.
	tcpx := filepath.Join(drop, "gorun-plugin-tcpx")
	cmd := attacker.Command("/bin/sh", "-c", `printf '%s' "$2" > "$1" && chmod 755 "$1"`, "sh", tcpx, script("tcpx"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("attacker: %v: %s", err, out)
	}
	// Another user's plugin in a directory only root writes.
	mate := filepath.Join(team, "gorun-plugin-teammate")
	// The victim's own, writable by its group.
	gw := filepath.Join(own, "gorun-plugin-gw")
	for _, f := range []struct {
		path  string
		owner *testusers.User
		mode  os.FileMode
	}{{mate, attacker, 0o755}, {gw, victim, 0o775}} {
		if err := os.WriteFile(f.path, []byte(script(filepath.Base(f.path))), 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chown(f.path, int(f.owner.UID), int(f.owner.GID))
		os.Chmod(f.path, f.mode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list := exec.CommandContext(ctx, gorunBin, "plugins", "list")
	list.SysProcAttr, list.Dir = victim.Credential(), victim.Home
	list.Env = append(victim.Env(), "GORUN_PLUGIN_PATH="+strings.Join([]string{drop, team, own}, ":"))
	r := runCmd(t, ctx, list, 60*time.Second)
	t.Logf("gorun plugins list, as %s:\n%s%s", victim.Name, r.stdout, r.stderr)
	if r.code != 0 {
		t.Errorf("exit %d", r.code)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			lines[f[3]] = l
		}
	}
	for path, why := range map[string]string{
		tcpx: "(refused: " + drop + " is writable by others (mode 1777): its sticky bit",
		mate: "(refused: " + mate + " is owned by user " + attacker.Name,
		gw:   "(refused: " + gw + " is writable by its group (mode 0775)",
	} {
		if !strings.Contains(lines[path], why) {
			t.Errorf("the listing does not show %s with %q", path, why)
		}
	}
	ents, _ := os.ReadDir(marks)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(marks, e.Name()))
		t.Errorf("plugin %s ran: %s", e.Name(), strings.TrimSpace(string(b)))
	}
}

// Security review row 7b: the plugin that a rank starts in a real job
// does not get the job's secret (GORUN_JOB_SECRET, which the rank has),
// while it has the rest of the rank's environment.
func TestPluginEnvInJob(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := buildPlugins(t, tmp)
	bin := buildCollectivesExample(t, tmp)
	// tcpexample behind a wrapper that records its environment.
	wrap := filepath.Join(tmp, "wrap")
	dumps := filepath.Join(tmp, "dumps")
	for _, d := range []string{wrap, dumps} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := "#!/bin/sh\nenv > " + dumps + "/env.$$\nexec " + filepath.Join(dir, "gorun-plugin-tcpexample") + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrap, "gorun-plugin-tcpexample"), []byte(w), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, 120*time.Second, nil, "-np", "2", "--iface", "lo", "--plugin", "tcpexample", "--plugin-dir", wrap,
		"-x", "GORUN_COLL_TRANSPORT=plugin", bin)
	checkCollectivesPassed(t, r, 2, "tcpexample", 1)
	ents, _ := os.ReadDir(dumps)
	if len(ents) < 2 {
		t.Fatalf("%d plugin environments recorded, want one per rank", len(ents))
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dumps, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		env := "\n" + string(b)
		if !strings.Contains(env, "\nGORUN_RANK=") || !strings.Contains(env, "\nGORUN_AGENT_SOCKET=") {
			t.Errorf("%s: not a rank's plugin environment:\n%s", e.Name(), b)
		}
		if strings.Contains(env, "\nGORUN_JOB_SECRET=") {
			t.Errorf("%s: the plugin got GORUN_JOB_SECRET", e.Name())
		}
	}
}
