package launcher

import (
	"os"
	"os/exec"
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
