package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestSelfBuildID(t *testing.T) {
	t.Parallel()
	id := selfBuildID()
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("selfBuildID() = %q", id)
	}
	// The same id as the Go tool reads.
	out, err := exec.Command("go", "tool", "buildid", mustExe(t)).Output()
	if err != nil {
		t.Skipf("go tool buildid: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != id {
		t.Fatalf("selfBuildID() = %q, go tool buildid says %q", id, got)
	}
}

func mustExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// buildDiff tells builds apart by what they were built from, not by how:
// cgo and tags are the same build, another commit, tree state, Go,
// platform or dependency version is not.
func TestBuildDiff(t *testing.T) {
	t.Parallel()
	base := func() *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Path: "github.com/gorun/gorun/cmd/gorun",
			Main: debug.Module{Path: "github.com/gorun/gorun", Version: "v0.0.0-20261201000000-f873ff3abcde+dirty"},
			Deps: []*debug.Module{{Path: "github.com/urfave/cli/v2", Version: "v2.27.7", Sum: "h1:a"}},
			Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "GOARCH", Value: "amd64"}, {Key: "GOOS", Value: "linux"},
				{Key: "vcs.revision", Value: "f873ff3abcde"}, {Key: "vcs.modified", Value: "true"}}}
	}
	for _, tc := range []struct {
		name   string
		change func(b *debug.BuildInfo)
		want   string // "" for the same build
	}{
		{"identical", func(*debug.BuildInfo) {}, ""},
		{"another program, static, tagged, with more modules", func(b *debug.BuildInfo) {
			b.Path = "github.com/gorun/gorun/cmd/gorun-tools"
			b.Settings[0].Value = "0"
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-tags", Value: "urfave_cli_no_docs"})
			b.Deps = append(b.Deps, &debug.Module{Path: "google.golang.org/grpc", Version: "v1.61.0"})
		}, ""},
		{"another commit", func(b *debug.BuildInfo) { b.Settings[3].Value = "0123456789ab" }, "vcs.revision 0123456789ab, this gorun's f873ff3abcde"},
		{"a clean tree", func(b *debug.BuildInfo) { b.Settings[4].Value = "false" }, "vcs.modified false"},
		{"another Go", func(b *debug.BuildInfo) { b.GoVersion = "go1.26.7" }, "Go go1.26.7, this gorun's go1.26.8"},
		{"another platform", func(b *debug.BuildInfo) { b.Settings[1].Value = "arm64" }, "GOARCH arm64"},
		{"no version control", func(b *debug.BuildInfo) { b.Settings = b.Settings[:3]; b.Main.Version = "(devel)" }, "version (devel)"},
		{"another module", func(b *debug.BuildInfo) { b.Main.Path = "example.com/other" }, "module example.com/other"},
		{"another dependency version", func(b *debug.BuildInfo) {
			b.Deps[0] = &debug.Module{Path: "github.com/urfave/cli/v2", Version: "v2.27.6", Sum: "h1:b"}
		},
			"github.com/urfave/cli/v2 v2.27.6, this gorun's v2.27.7"},
	} {
		other := base()
		tc.change(other)
		got := buildDiff(base(), other)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: buildDiff = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Tools finds gorun-tools next to gorun's executable only, and refuses one
// that is missing, not a Go program, or another build, saying how to get
// the right one; SameBuild takes this very binary for its own build.
func TestTools(t *testing.T) {
	t.Parallel()
	exe := mustExe(t)
	if err := SameBuild(exe); err != nil {
		t.Errorf("SameBuild(this test binary): %v", err)
	}
	// Run as gorun from a directory of its own (a hard link: os.Executable
	// names the link), next to each kind of gorun-tools.
	for _, tc := range []struct {
		name  string
		tools func(dir string) error // makes dir/gorun-tools, or not
		want  string                 // in the error; "" for none
	}{
		{"this build", func(dir string) error { return os.Link(exe, filepath.Join(dir, ToolsBinary)) }, ""},
		{"missing", func(string) error { return nil }, "gorun-tools is not there (`make build`, or `go install ./cmd/...`, puts gorun-tools next to gorun)"},
		{"not a Go program", func(dir string) error { return copyFile("/bin/true", filepath.Join(dir, ToolsBinary)) }, "not a Go program"},
		{"another build", func(dir string) error {
			gofmt := filepath.Join(runtime.GOROOT(), "bin", "gofmt")
			if _, err := os.Stat(gofmt); err != nil {
				t.Skipf("no Go program of another build at hand: %v", err)
			}
			return copyFile(gofmt, filepath.Join(dir, ToolsBinary))
		}, "is another build than this gorun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Link(exe, filepath.Join(dir, "gorun")); err != nil {
				t.Skipf("hard link the test binary: %v", err)
			}
			if err := tc.tools(dir); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(dir, "gorun"), "-test.run=^TestToolsHelper$")
			cmd.Env = append(os.Environ(), "GORUN_TEST_TOOLS_HELPER=1")
			out, _ := cmd.CombinedOutput()
			got, _, _ := strings.Cut(string(out), "\n")
			switch {
			case tc.want == "" && got != "tools "+filepath.Join(dir, ToolsBinary):
				t.Errorf("Tools() next to a gorun-tools of this build: %s", got)
			case tc.want != "" && (!strings.Contains(got, "error no gorun-tools: ") || !strings.Contains(got, tc.want)):
				t.Errorf("Tools(): %s\nwant an error with %q", got, tc.want)
			}
		})
	}
}

// TestToolsHelper is TestTools' gorun: it prints what Tools returns.
func TestToolsHelper(t *testing.T) {
	if os.Getenv("GORUN_TEST_TOOLS_HELPER") != "1" {
		t.Skip("run by TestTools")
	}
	p, err := Tools()
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("tools", p)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
