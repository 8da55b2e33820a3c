package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

var pluginsBuilt struct {
	sync.Mutex
	dirs map[string]error
}

// buildPlugins builds the example plugins (examples/plugins), the fabric
// plugin and the plugins package's test plugin into dir/plugins (once per
// dir) and returns that directory. The fabric plugin needs cgo and
// libfabric-dev, which CI installs.
func buildPlugins(t *testing.T, dir string) string {
	t.Helper()
	testenv.SkipShort(t, "it builds the plugins (the fabric one with cgo)")
	out := filepath.Join(dir, "plugins")
	pluginsBuilt.Lock()
	defer pluginsBuilt.Unlock()
	if pluginsBuilt.dirs == nil {
		pluginsBuilt.dirs = map[string]error{}
	}
	err, done := pluginsBuilt.dirs[out]
	if !done {
		for _, p := range []struct{ name, pkg, cgo string }{
			{"tcpexample", "examples/plugins/tcpexample", "0"},
			{"collexample", "examples/plugins/collexample", "0"},
			{"testplugin", "plugins/internal/testplugin", "0"},
			{"fabric", "plugins/fabric", "1"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(out, "gorun-plugin-"+p.name), "../../"+p.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+p.cgo)
			if b, berr := cmd.CombinedOutput(); berr != nil {
				err = &buildError{p.name, string(b)}
				break
			}
		}
		os.Chmod(out, 0o755)
		pluginsBuilt.dirs[out] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type buildError struct{ name, out string }

func (e *buildError) Error() string { return "building plugin " + e.name + ": " + e.out }

// gorun plugins list finds the plugins in --plugin-dir, starts each and
// shows what it says of itself; a file that is not executable is named
// as such.
func TestPluginsList(t *testing.T) {
	t.Parallel()
	dir := buildPlugins(t, t.TempDir())
	os.WriteFile(filepath.Join(dir, "gorun-plugin-broken"), []byte("not a program"), 0o644)
	r := runGorun(t, 60*time.Second, nil, "plugins", "list", "--plugin-dir", dir)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	for name, want := range map[string][]string{
		"tcpexample":  {"0.1.0", "transport", filepath.Join(dir, "gorun-plugin-tcpexample"), "lo (tcp)"},
		"collexample": {"0.1.0", "collective"},
		"testplugin":  {"0.0.1", "transport", "unix [test]"},
		"fabric":      {"transport", "tcp;ofi_rxm"},
		"broken":      {"not an executable file"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[name], w) {
				t.Errorf("plugins list: %s's line %q lacks %q\n%s", name, lines[name], w, r.stdout)
			}
		}
	}
	r = runGorun(t, 60*time.Second, nil, "plugins", "list", "--plugin-dir", dir, "--json")
	var js struct {
		Dirs    []string `json:"dirs"`
		Plugins []struct {
			Name string `json:"Name"`
			Info struct {
				Version string `json:"version"`
			} `json:"info"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || len(js.Dirs) == 0 || js.Dirs[0] != dir || len(js.Plugins) != 5 {
		t.Errorf("plugins list --json: %v\n%s", err, r.stdout)
	}
}

// gorun plugins test runs the transport contract against a plugin and
// probes it; a plugin that breaks under the suite fails it (exit 1), and
// one that is not there is a usage error that says where gorun looked.
func TestPluginsTest(t *testing.T) {
	t.Parallel()
	dir := buildPlugins(t, t.TempDir())
	// tcpexample hands its sockets off, and is probed both ways; fabric
	// cannot (libfabric owns its endpoints).
	plugin := regexp.MustCompile(`bandwidth +plugin +1 MiB`)
	handedOff := regexp.MustCompile(`bandwidth +handed off +1 MiB`)
	for name, handsOff := range map[string]bool{"tcpexample": true, "fabric": false} {
		r := runGorun(t, 240*time.Second, nil, "plugins", "test", "--plugin-dir", dir, name)
		if r.code != 0 || !strings.Contains(r.stdout, "transport contract: passed") || !plugin.MatchString(r.stdout) || handedOff.MatchString(r.stdout) != handsOff {
			t.Errorf("plugins test %s: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
	}
	r := runGorunIn(t, "", append(os.Environ(), "TESTPLUGIN_CRASH_AFTER=20"), 240*time.Second, nil,
		"plugins", "test", "--quick", filepath.Join(dir, "gorun-plugin-testplugin"))
	if r.code != 1 || !strings.Contains(r.stderr, "failed the transport contract") || !strings.Contains(r.stdout+r.stderr, "exited") {
		t.Errorf("plugins test of a plugin that crashes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runGorun(t, 30*time.Second, nil, "plugins", "test", "--plugin-dir", dir, "nothere")
	if r.code != 2 || !strings.Contains(r.stderr, "gorun-plugin-nothere") || !strings.Contains(r.stderr, dir) {
		t.Errorf("plugins test of a missing plugin: exit %d\n%s", r.code, r.stderr)
	}
	r = runGorun(t, 30*time.Second, nil, "plugins", "test", "/bin/true")
	if r.code != 1 || !strings.Contains(r.stderr, "/bin/true") {
		t.Errorf("plugins test of a program that is not a plugin: exit %d\n%s", r.code, r.stderr)
	}
}

// Go ranks carry their collectives over a plugin's transport (forced
// between every pair, on one host), run a collective plugin's allreduce,
// go on over TCP when asked to and the plugin is missing, and fail naming
// it when not asked to.
func TestPluginJob(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := buildPlugins(t, tmp)
	bin := buildCollectivesExample(t, tmp)
	plugin := func(name string, more ...string) []string {
		return append([]string{"-np", "3", "--iface", "lo", "--plugin", name, "--plugin-dir", dir, "-x", "GORUN_COLL_TRANSPORT=plugin"}, more...)
	}
	checkCollectivesPassed(t, runGorun(t, 120*time.Second, nil, append(plugin("tcpexample"), bin)...), 3, "tcpexample", 1)
	checkCollectivesPassed(t, runGorun(t, 120*time.Second, nil, append(plugin("fabric", "--fabric-provider", "tcp;ofi_rxm"), bin)...), 3, "fabric", 1)
	checkCollectivesPassed(t, runGorun(t, 120*time.Second, nil, "-np", "3", "--plugin", "collexample", "--plugin-dir", dir, bin), 3, "shm", 1)

	r := runGorun(t, 120*time.Second, nil, append(plugin("nothere", "--transport-fallback", "tcp"), bin)...)
	checkCollectivesPassed(t, r, 3, "tcp", 1)
	if !strings.Contains(r.stderr, "gorun-plugin-nothere") || !strings.Contains(r.stderr, "going on over tcp") {
		t.Errorf("the fallback is silent:\n%s", r.stderr)
	}
	r = runGorun(t, 120*time.Second, nil, append(plugin("nothere"), bin)...)
	if r.code == 0 || !strings.Contains(r.stderr, "gorun-plugin-nothere") || !strings.Contains(r.stderr, "--transport-fallback tcp") || !strings.Contains(r.stderr, "failed: rank") {
		t.Errorf("a missing plugin without fallback: exit %d\n%s", r.code, r.stderr)
	}
	// The preflight: a plugin that passes starts the job, one that fails
	// (it crashes under the suite) stops it before any rank starts.
	r = runGorun(t, 120*time.Second, nil, append(plugin("tcpexample", "--plugin-check"), bin)...)
	checkCollectivesPassed(t, r, 3, "tcpexample", 1)
	if !strings.Contains(r.stderr, "passed the quick transport contract") {
		t.Errorf("--plugin-check says nothing:\n%s", r.stderr)
	}
	r = runGorunIn(t, "", append(os.Environ(), "TESTPLUGIN_CRASH_AFTER=20"), 120*time.Second, nil, append(plugin("testplugin", "--plugin-check"), bin)...)
	if r.code != 125 || !strings.Contains(r.stderr, "no rank was started") || strings.Contains(r.stdout, "collectives PASS") {
		t.Errorf("--plugin-check of a failing plugin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"--transport-fallback", "udp", "--plugin", "x"}, {"--transport-fallback", "tcp"}, {"--plugin", "x", "--plugin-opt", "novalue"}} {
		if r := runGorun(t, 30*time.Second, nil, append(append([]string{"-np", "1"}, args...), "true")...); r.code != 2 || !strings.Contains(r.stderr, args[0]) && !strings.Contains(r.stderr, args[len(args)-2]) {
			t.Errorf("%q: exit %d, %s", args, r.code, r.stderr)
		}
	}
}

// A plugin that dies in the middle of a job (rank 1's) stops the job: its
// peers lose rank 1 over it, gorun reports the plugin's exit, the summary
// names the rank that failed first, and no rank or plugin process
// survives. (What the rank itself gets, an error naming the plugin with
// its last log lines, is tested in package plugins: here its peers may
// fail first.)
func TestPluginCrashInJob(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := buildPlugins(t, tmp)
	bin := buildCollectivesExample(t, tmp)
	mark := newMark(t)
	r := runGorun(t, 120*time.Second, nil, "-np", "3", "--iface", "lo", "--plugin", "testplugin", "--plugin-dir", dir,
		"-x", "GORUN_COLL_TRANSPORT=plugin", "-x", "TESTPLUGIN_CRASH_AFTER=20", "-x", "TESTPLUGIN_CRASH_RANK=1", "-x", "GORUN_TEST_MARK="+mark, bin)
	if r.code == 0 {
		t.Fatalf("exit 0 with a crashing plugin\n%s", r.stderr)
	}
	for _, w := range []string{"plugin process exited: plugin=" + filepath.Join(dir, "gorun-plugin-testplugin"), `error="exit status 3"`, "failed: rank"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	if !strings.Contains(r.stderr, "rank 1 over testplugin") && !strings.Contains(r.stderr, "plugin testplugin") {
		t.Errorf("no rank names rank 1 or its plugin")
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", r.stderr)
	}
	assertNoSurvivors(t, mark, 5*time.Second)
}

// Across SSH hosts: the fabric plugin (libfabric's tcp provider over the
// hosts' eth0) and tcpexample carry the collectives between hosts while
// shared memory stays inside each, and gorun bench checks its results
// through the fabric plugin.
func TestSSHPlugins(t *testing.T) {
	c := sharedCluster(t)
	dir := buildPlugins(t, binDir)
	bin := buildCollectivesExample(t, binDir)
	ssh := []string{"--ssh-config", c.SSHConfig, "--plugin-dir", dir}
	fabric := []string{"--plugin", "fabric", "--fabric-provider", "tcp;ofi_rxm"}
	checkCollectivesPassed(t, runBin(t, gorunBin, 180*time.Second, append(append(ssh, "-H", "h1:2,h2:2"), append(fabric, bin)...)...), 4, "shm+fabric", 2)
	checkCollectivesPassed(t, runBin(t, gorunBin, 180*time.Second, append(ssh, "-H", "h1:1,h2:1,h3:1", "--plugin", "tcpexample", bin)...), 3, "tcpexample", 3)
	r := runBin(t, gorunBin, 180*time.Second, append(append(ssh, "bench", "allreduce", "-H", "h1:1,h2:1"),
		append(fabric, "-b", "4K", "-e", "4M", "-f", "32", "--iters", "3")...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "# Transport            : fabric") ||
		len(benchRow.FindAllStringSubmatch(r.stdout, -1)) != 3 || !strings.Contains(r.stdout, "# Out of bounds values : 0") {
		t.Errorf("bench through the fabric plugin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
