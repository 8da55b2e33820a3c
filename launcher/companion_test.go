package launcher

import (
	"os"
	"path/filepath"
	"testing"
)

// A job of gorun-tools (gorun bench's ranks) stages gorun-tools next to
// gorun, where there is one to stage; other jobs do not, and gorun's own
// programs never take gorun-pmix along.
func TestToolsToStage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe, tools := filepath.Join(dir, "gorun"), filepath.Join(dir, ToolsBinary)
	if err := os.WriteFile(tools, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := toolsToStage(exe, []string{ToolsProgram, "bench-rank"}); got != tools {
		t.Errorf("toolsToStage(gorun bench's ranks) = %q, want %q", got, tools)
	}
	if got := toolsToStage(exe, []string{"hostname"}); got != "" {
		t.Errorf("toolsToStage(hostname) = %q, want none", got)
	}
	if got := toolsToStage(filepath.Join(t.TempDir(), "gorun"), []string{ToolsProgram}); got != "" {
		t.Errorf("toolsToStage without a gorun-tools = %q, want none", got)
	}
	for _, prog := range []string{ToolsProgram, SelfProgram} {
		if programMayNeedPMIx([]string{prog}) {
			t.Errorf("programMayNeedPMIx(%s): gorun's own programs speak no PMIx", prog)
		}
	}
	s := &SSHStarter{pmixPlugin: "/x/gorun-pmix", tools: "/x/" + ToolsBinary}
	if got, want := s.with(), " (with gorun-pmix and gorun-tools next to it)"; got != want {
		t.Errorf("with() = %q, want %q", got, want)
	}
	if got := (&SSHStarter{}).with(); got != "" {
		t.Errorf("with() of nothing staged = %q", got)
	}
}
