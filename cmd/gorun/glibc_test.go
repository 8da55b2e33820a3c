package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/sshclient"
	"github.com/gorun/gorun/testhosts"
)

// The glibc tests make a test host look older than the gorun built with
// cgo needs, as a RHEL 7 node (glibc 2.17) would be next to a new head:
// a getconf that says "glibc 2.17", bind-mounted over /usr/bin/getconf
// in the host's own mount namespace, for the staging probe to find; and a
// copy of gorun whose needed GLIBC_2.x version is patched in its .dynstr
// to GLIBC_9.x, which the host's real dynamic loader refuses to start.

var (
	staticOnce sync.Once
	staticBin  string
	staticErr  error
)

// gorunStatic builds gorun with CGO_ENABLED=0, once, into a directory
// every host sees.
func gorunStatic(t *testing.T) string {
	t.Helper()
	staticOnce.Do(func() {
		staticBin = filepath.Join(binDir, "static", "gorun-static")
		staticErr = goBuild(staticBin, "0")
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticBin
}

// oldGlibc makes host's getconf say glibc 2.17 until the test ends.
func oldGlibc(t *testing.T, c *testhosts.Cluster, host string) {
	t.Helper()
	ctx := context.Background()
	fake := filepath.Join(binDir, "getconf-2.17")
	script := "#!/bin/sh\nif [ \"$1\" = GNU_LIBC_VERSION ]; then echo 'glibc 2.17'; exit 0; fi\necho \"getconf: $1: unknown variable\" >&2; exit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Exec(ctx, host, "mount", "--bind", fake, "/usr/bin/getconf").CombinedOutput(); err != nil {
		t.Fatalf("%s: mount a fake getconf: %v %s", host, err, out)
	}
	t.Cleanup(func() {
		if out, err := c.Exec(ctx, host, "umount", "/usr/bin/getconf").CombinedOutput(); err != nil {
			t.Errorf("%s: umount the fake getconf: %v %s", host, err, out)
		}
	})
	if out, err := c.Exec(ctx, host, "sh", "-c", "getconf GNU_LIBC_VERSION").Output(); err != nil || string(out) != "glibc 2.17\n" {
		t.Fatalf("%s: getconf says %q (%v)", host, out, err)
	}
}

// headDir returns a new directory under /tmp, which is the head's own (the
// hosts' /tmp is theirs), holding a copy of each file under the name
// given: name, path, name, path...
func headDir(t *testing.T, files ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gorun-glibc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i := 0; i+1 < len(files); i += 2 {
		b, err := os.ReadFile(files[i+1])
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, files[i]), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cacheDir is where gorun stages the binary bin: its sha256's first 16
// hex digits.
func cacheDir(t *testing.T, bin string) string {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return "/.cache/gorun/bin/" + hex.EncodeToString(sum[:])[:16] + "/gorun"
}

// forgetStaged removes the copies of the binaries bins that gorun staged
// into root's ~/.cache/gorun, which the test hosts share (as an NFS home)
// and which outlives a test and a test run, now and when the test ends:
// the next job that stages one copies it again, and says so (gorun says
// nothing when it finds its copy there).
func forgetStaged(t *testing.T, bins ...string) {
	t.Helper()
	root, err := user.LookupId("0")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, b := range bins {
		dirs = append(dirs, filepath.Dir(filepath.Join(root.HomeDir, cacheDir(t, b))))
	}
	forget := func() {
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				t.Error(err)
			}
		}
	}
	forget()
	t.Cleanup(forget)
}

// agentExes runs a job through head on hosts and returns, for each host,
// the executable of the agent that started its ranks (each rank reads its
// parent's), with the result.
func agentExes(t *testing.T, c *testhosts.Cluster, head, hosts string) (map[string]string, result) {
	t.Helper()
	r := runBin(t, head, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", hosts, "sh", "-c", `echo "exe $(hostname) $(readlink /proc/$PPID/exe)"`)
	exes := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "exe" {
			exes[f[1]] = f[2]
		}
	}
	return exes, r
}

// A host whose glibc is too old for gorun (built with cgo) gets
// gorun-static, from next to the head's gorun, with one line that says so;
// without a gorun-static the job fails, saying how to make one.
func TestSSHStagingOldGlibc(t *testing.T) {
	c := sharedCluster(t)
	static := gorunStatic(t)
	need, _, err := sshclient.GlibcNeeds(gorunBin)
	if err != nil || !sshclient.OlderGlibc("2.17", need) {
		t.Fatalf("gorun built with cgo needs glibc %q (%v), want a version newer than 2.17", need, err)
	}
	oldGlibc(t, c, "h4")
	note := regexp.MustCompile(`(?m)^gorun: h4: its glibc is 2\.17; this gorun needs glibc ` + regexp.QuoteMeta(need) + ` or newer: using gorun-static, a copy in \S+$`)

	t.Run("static fallback", func(t *testing.T) {
		forgetStaged(t, gorunBin, static)
		head := headDir(t, "gorun", gorunBin, "gorun-static", static)
		exes, r := agentExes(t, c, filepath.Join(head, "gorun"), "h3:2,h4:2")
		if r.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		if n := len(note.FindAllString(r.stderr, -1)); n != 1 {
			t.Errorf("%d notes about h4's glibc, want 1:\n%s", n, r.stderr)
		}
		if strings.Contains(r.stderr, "h3: its glibc") || strings.Count(r.stderr, "using a copy in") != 1 {
			t.Errorf("h3 (new glibc) should get the cgo build as usual:\n%s", r.stderr)
		}
		if !strings.HasSuffix(exes["h3"], cacheDir(t, gorunBin)) || !strings.HasSuffix(exes["h4"], cacheDir(t, static)) {
			t.Errorf("agents: h3 %s, want the cgo build %s; h4 %s, want gorun-static %s\n%s",
				exes["h3"], cacheDir(t, gorunBin), exes["h4"], cacheDir(t, static), r.stderr)
		}
		if strings.Count(r.stdout, "exe h4 ") != 2 || strings.Count(r.stdout, "exe h3 ") != 2 {
			t.Errorf("stdout:\n%s", r.stdout)
		}
		// Again: both copies are in the cache, so not a word about them.
		exes, r = agentExes(t, c, filepath.Join(head, "gorun"), "h3:2,h4:2")
		if r.code != 0 || strings.Contains(r.stderr, "a copy in") || !strings.HasSuffix(exes["h4"], cacheDir(t, static)) {
			t.Errorf("second run: exit %d, h4's agent %s, want gorun-static and no note\n%s", r.code, exes["h4"], r.stderr)
		}
	})

	t.Run("no gorun-static", func(t *testing.T) {
		head := headDir(t, "gorun", gorunBin)
		r := runBin(t, filepath.Join(head, "gorun"), 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h3,h4", "hostname")
		want := fmt.Sprintf("h4: its glibc is 2.17; this gorun needs glibc %s or newer, and there is no %s to use instead: "+
			"`make build` makes one next to gorun, or run CGO_ENABLED=0 go build -o %[2]s ./cmd/gorun", need, filepath.Join(head, "gorun-static"))
		if r.code != 125 || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, want 125 and %q\n%s", r.code, want, r.stderr)
		}
	})

	t.Run("static head", func(t *testing.T) {
		head := headDir(t, "gorun", static)
		exes, r := agentExes(t, c, filepath.Join(head, "gorun"), "h4")
		if r.code != 0 || strings.Contains(r.stderr, "its glibc") || !strings.HasSuffix(exes["h4"], cacheDir(t, static)) {
			t.Errorf("exit %d, agent %s\n%s", r.code, exes["h4"], r.stderr)
		}
	})

	// The file at the head's path on the host (a shared file system, where
	// no staging is needed) needs more than the host's glibc: its loader
	// refuses it. h4's getconf says 2.17, too old for gorun: gorun-static;
	// h3's says its real version, new enough: the cgo build, copied.
	t.Run("refused by the loader", func(t *testing.T) {
		b, err := os.ReadFile(gorunBin)
		if err != nil {
			t.Fatal(err)
		}
		v := []byte("GLIBC_" + need + "\x00")
		if !bytes.Contains(b, v) {
			t.Fatalf("%s lacks %q", gorunBin, v)
		}
		tooNew := "9" + need[1:]
		// The hosts' /tmp is their own: the copy goes there from a
		// directory they share.
		patched := filepath.Join(binDir, "gorun-"+tooNew)
		if err := os.WriteFile(patched, bytes.ReplaceAll(b, v, []byte("GLIBC_"+tooNew+"\x00")), 0o755); err != nil {
			t.Fatal(err)
		}
		head := headDir(t, "gorun", gorunBin, "gorun-static", static)
		forgetStaged(t, gorunBin, static)
		for _, h := range []string{"h3", "h4"} {
			if out, err := c.Exec(context.Background(), h, "sh", "-c", `mkdir -p "$1" && cp "$2" "$1/gorun"`, "sh", head, patched).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s", h, err, out)
			}
			if out, err := c.Exec(context.Background(), h, filepath.Join(head, "gorun"), "--version").CombinedOutput(); err == nil ||
				!strings.Contains(string(out), "GLIBC_"+tooNew+"' not found") {
				t.Fatalf("%s: the patched gorun ran or failed otherwise: %v %s", h, err, out)
			}
		}
		exes, r := agentExes(t, c, filepath.Join(head, "gorun"), "h3:2,h4:2")
		if r.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		refusedNote := regexp.MustCompile(`(?m)^gorun: h4: its glibc is 2\.17 \(its loader found no GLIBC_` + regexp.QuoteMeta(tooNew) +
			`\); this gorun needs glibc ` + regexp.QuoteMeta(need) + ` or newer: using gorun-static, a copy in \S+$`)
		if n := len(refusedNote.FindAllString(r.stderr, -1)); n != 1 {
			t.Errorf("%d notes about h4's glibc, want 1:\n%s", n, r.stderr)
		}
		h3 := "gorun: h3: the gorun at " + filepath.Join(head, "gorun") + " cannot start there: its dynamic loader found no GLIBC_" + tooNew + "; using a copy in "
		if !strings.Contains(r.stderr, h3) || strings.Contains(r.stderr, "not found (required by") {
			t.Errorf("stderr lacks %q, or shows the loader's own words:\n%s", h3, r.stderr)
		}
		if !strings.HasSuffix(exes["h3"], cacheDir(t, gorunBin)) || !strings.HasSuffix(exes["h4"], cacheDir(t, static)) {
			t.Errorf("agents: h3 %s, want the cgo build; h4 %s, want gorun-static\n%s", exes["h3"], exes["h4"], r.stderr)
		}

		r = runBin(t, filepath.Join(head, "gorun"), 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h4", "--no-stage", "hostname")
		want := "h4: the gorun at " + filepath.Join(head, "gorun") + " cannot start there: its dynamic loader found no GLIBC_" + tooNew +
			" (its glibc is too old for that gorun); without --no-stage gorun copies itself, or gorun-static, there"
		if r.code != 125 || !strings.Contains(r.stderr, want) {
			t.Errorf("--no-stage: exit %d, want 125 and %q\n%s", r.code, want, r.stderr)
		}
	})
}
