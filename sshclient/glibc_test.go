package sshclient

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The fixtures in testdata/elf are made by testdata/elf/make.sh.

func TestGlibcNeeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notELF, empty := filepath.Join(dir, "script"), filepath.Join(dir, "empty")
	if err := errors.Join(os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755), os.WriteFile(empty, nil, 0o644)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, version, loader string
	}{
		{"program", "testdata/elf/hello", "2.34", "/lib64/ld-linux-x86-64.so.2"},
		// 2.14 > 2.2.5, which a comparison of strings would get wrong.
		{"library", "testdata/elf/libcopy.so", "2.14", ""},
		{"static", "testdata/elf/static", "", ""},
		{"not ELF", notELF, "", ""},
		{"empty", empty, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			version, loader, err := GlibcNeeds(tc.path)
			if err != nil || version != tc.version || loader != tc.loader {
				t.Errorf("GlibcNeeds(%s) = %q, %q, %v; want %q, %q", tc.path, version, loader, err, tc.version, tc.loader)
			}
		})
	}
	if _, _, err := GlibcNeeds(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}

func TestOlderGlibc(t *testing.T) {
	t.Parallel()
	cases := []struct {
		have, need string
		older      bool
	}{
		{"2.28", "2.34", true},
		{"2.34", "2.34", false},
		{"2.36", "2.34", false},
		{"2.9", "2.14", true}, // numbers, not strings
		{"2.14", "2.9", false},
		{"2.3", "2.3.4", true},
		{"2.3.4", "2.34", true},
		{"2.34", "2.34.0", false},
		{"3.0", "2.99", false},
		{"2.17", "9.34", true},
		{"", "2.34", false}, // unknown: not known to be older
		{"2.17", "", false},
		{"2.x", "2.34", false},
		{"2..3", "2.34", false},
		{"-1", "2.34", false},
		{"2.3.4.5.6", "2.34", false},
	}
	for _, tc := range cases {
		if got := OlderGlibc(tc.have, tc.need); got != tc.older {
			t.Errorf("OlderGlibc(%q, %q) = %v, want %v", tc.have, tc.need, got, tc.older)
		}
	}
}

func TestGlibcVersion(t *testing.T) {
	t.Parallel()
	cases := []struct{ getconf, want string }{
		{"glibc 2.36", "2.36"},
		{"glibc 2.17\n", "2.17"},
		{"glibc 2.3.4", "2.3.4"},
		{"", ""},
		{"musl 1.2.4", ""},
		{"glibc", ""},
		{"glibc 2.36 extra", ""},
		{"glibc two", ""},
		{"getconf: Unrecognized variable `GNU_LIBC_VERSION'", ""},
	}
	for _, tc := range cases {
		if got := glibcVersion(tc.getconf); got != tc.want {
			t.Errorf("glibcVersion(%q) = %q, want %q", tc.getconf, got, tc.want)
		}
	}
}

func TestMissingGlibc(t *testing.T) {
	t.Parallel()
	cases := []struct {
		line, want string
		ok         bool
	}{
		{"/opt/gorun: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by /opt/gorun)", "2.34", true},
		{"gorun: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by gorun)", "2.32", true},
		{"./gorun: /lib64/libpthread.so.0: version `GLIBC_2.3.4' not found (required by ./gorun)", "2.3.4", true},
		{"./gorun: /lib64/libc.so.6: version 'GLIBC_2.38' not found (required by ./gorun)", "2.38", true},
		{"./x: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by ./x)", "", false},
		{"./x: /lib64/libc.so.6: version `GLIBC_PRIVATE' not found (required by ./x)", "", false},
		{"gorun: error while loading shared libraries: libfoo.so.1: cannot open shared object file", "", false},
		{"Error relocating ./gorun: __libc_start_main: symbol not found", "", false},
		{"", "", false},
	}
	for _, tc := range cases {
		got, ok := MissingGlibc(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("MissingGlibc(%q) = %q, %v; want %q, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// glibcFixture copies the fixture hello (which needs GLIBC_2.34) into a
// new directory, with each old -> new replacement (of the same length)
// made in its bytes.
func glibcFixture(t *testing.T, repl ...string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/elf/hello")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(repl); i += 2 {
		old, new := []byte(repl[i]), []byte(repl[i+1])
		if len(old) != len(new) || !bytes.Contains(b, old) {
			t.Fatalf("cannot replace %q by %q in hello", old, new)
		}
		b = bytes.ReplaceAll(b, old, new)
	}
	p := filepath.Join(t.TempDir(), "gorun")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fixtureRuns skips the test unless this machine can run the fixture
// hello: linux/amd64 with glibc's loader.
func fixtureRuns(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the fixture is a linux/amd64 program; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		t.Skipf("not a glibc system: %v", err)
	}
}

// This machine's own dynamic loader, refusing a program that needs a
// newer glibc than there is, says so in words that MissingGlibc knows.
func TestMissingGlibcRealLoader(t *testing.T) {
	t.Parallel()
	fixtureRuns(t)
	p := glibcFixture(t, "GLIBC_2.34", "GLIBC_9.34")
	out, err := exec.Command(p).CombinedOutput()
	if err == nil {
		t.Fatalf("a program that needs GLIBC_9.34 ran: %s", out)
	}
	if v, ok := MissingGlibc(strings.TrimSpace(string(out))); !ok || v != "9.34" {
		t.Errorf("MissingGlibc(%q) = %q, %v; want 9.34", out, v, ok)
	}
}

// fakeGetconf returns a directory holding a getconf that runs script.
func fakeGetconf(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "getconf"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Stage refuses to copy a gorun linked against glibc to a host whose
// glibc is older than it needs, or that lacks its loader; it copies one
// where the version is unknown, and a static gorun anywhere.
func TestStageGlibc(t *testing.T) {
	t.Parallel()
	fixtureRuns(t) // the "host" is this machine
	old := fakeGetconf(t, `[ "$1" = GNU_LIBC_VERSION ] && echo "glibc 2.17"`)
	current := fakeGetconf(t, `[ "$1" = GNU_LIBC_VERSION ] && echo "glibc 2.36"`)
	musl := fakeGetconf(t, `echo "getconf: GNU_LIBC_VERSION: unknown variable" >&2; exit 1`)
	dynamic := glibcFixture(t)
	noLoader := glibcFixture(t, "/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-99.so.2")
	static := filepath.Join(t.TempDir(), "gorun")
	if b, err := os.ReadFile("testdata/elf/static"); err != nil || os.WriteFile(static, b, 0o755) != nil {
		t.Fatalf("copy the static fixture: %v", err)
	}
	cases := []struct {
		name, getconf, exe string
		refused            *GlibcError // nil: staged
	}{
		{"too old", old, dynamic, &GlibcError{Need: "2.34", Have: "2.17"}},
		{"new enough", current, dynamic, nil},
		{"unknown", musl, dynamic, nil},
		{"no loader", current, noLoader, &GlibcError{Need: "2.34", Have: "2.36", Loader: "/lib64/ld-linux-x86-99.so.2"}},
		{"static", old, static, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c := stageClient(t, withPathFirst(tc.getconf))
			content, err := os.ReadFile(tc.exe)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// wantPath holds this very gorun, as on a shared file system:
			// refused all the same, for the host cannot run it.
			same := filepath.Join(s.home, "bin", "gorun")
			os.MkdirAll(filepath.Dir(same), 0o755)
			os.WriteFile(same, content, 0o755)
			for _, want := range []string{same, "/nonexistent/bin/gorun"} {
				n := s.execCount()
				st, err := Stage(ctx, c, tc.exe, want)
				if tc.refused == nil {
					if err != nil || !st.Cached && st.Path != same {
						t.Errorf("Stage(%s) = %+v, %v; want it staged or used as is", want, st, err)
					}
					continue
				}
				var ge *GlibcError
				var he *HostError
				if !errors.As(err, &ge) || !errors.As(err, &he) || he.Host != "node1" || *ge != *tc.refused {
					t.Fatalf("Stage(%s) = %+v, %v; want a HostError for node1 with %+v", want, st, err, tc.refused)
				}
				if s.execCount() != n+1 {
					t.Errorf("Stage(%s) ran %d commands, want 1 (the probe, no copy)", want, s.execCount()-n)
				}
				t.Logf("%v", err)
			}
			if _, err := os.Stat(cacheFor(s.home, content)); (err == nil) != (tc.refused == nil) {
				t.Errorf("the cache holds gorun: %v, want %v", err == nil, tc.refused == nil)
			}
		})
	}
}

func TestGlibcErrorText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		e    GlibcError
		want string
	}{
		{GlibcError{Need: "2.34", Have: "2.17"}, "its glibc is 2.17; this gorun needs glibc 2.34 or newer"},
		{GlibcError{Need: "2.34", Missing: "2.32"}, "its glibc is unknown (its loader found no GLIBC_2.32); this gorun needs glibc 2.34 or newer"},
		{GlibcError{Need: "2.34", Loader: "/lib/ld-linux-aarch64.so.1"}, "it has no /lib/ld-linux-aarch64.so.1, the dynamic loader of the glibc 2.34 or newer that this gorun needs (not a glibc system?)"},
	}
	for _, tc := range cases {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
}

// StartCommand's sh comparison of glibc versions agrees with OlderGlibc.
func TestStartGlibcOlder(t *testing.T) {
	t.Parallel()
	// The o function alone, from startGlibc's second line.
	lines := strings.Split(startGlibc, "\n")
	fn := strings.ReplaceAll(lines[1], "%%", "%")
	for _, tc := range [][2]string{
		{"2.17", "2.34"}, {"2.34", "2.34"}, {"2.36", "2.34"}, {"2.9", "2.10"}, {"2.10", "2.9"},
		{"3", "2.99"}, {"2.34", "2.34.1"}, {"2.34.1", "2.34"}, {"2", "2.0"}, {"2.x", "2.34"}, {"", "2.34"}, {"2..3", "2.34"},
	} {
		err := exec.Command("/bin/sh", "-c", fn+"\no \"$1\" \"$2\"", "sh", tc[0], tc[1]).Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if got, want := err == nil, OlderGlibc(tc[0], tc[1]); got != want {
			t.Errorf("o %q %q: older %v, OlderGlibc says %v", tc[0], tc[1], got, want)
		}
	}
}
