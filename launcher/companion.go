package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gorun/gorun/internal/filetrust"
	"github.com/gorun/gorun/internal/pluginbin"
)

// gorun's programs by role. gorun (cmd/gorun) is the launcher: the head,
// the agent and the bind step; it links no collective runtime and no
// plugin host, so no gRPC or go-plugin, whose package initialisation would
// cost every gorun process (head, agent, bind step) about 1.5 ms at start.
// gorun-tools (cmd/gorun-tools) is its companion, which holds them: the
// ranks of `gorun bench`, which gorun launches as the job's program
// (ToolsProgram), as mpirun launches nccl-tests; and the plugin host of
// `gorun plugins` and of a job's --plugin-check, which gorun runs. gorun
// finds it next to its own executable only (never in PATH, where another
// build could be), runs it only when it is of gorun's own build
// (SameBuild), and copies it next to itself when it stages itself to a
// host for a job that runs it there (SSHStarter).

// ToolsBinary is the file name of gorun-tools, next to gorun.
const ToolsBinary = "gorun-tools"

// ToolsProgram, as a job's program, names the gorun-tools next to the
// gorun that each host's agent runs: `gorun bench` launches its ranks so,
// wherever gorun was staged.
const ToolsProgram = "gorun:tools"

// ErrNoTools is wrapped by the errors of a gorun that has no usable
// gorun-tools next to it.
var ErrNoTools = errors.New("no gorun-tools")

// Tools returns the gorun-tools next to this gorun's executable, checked:
// a file that others could have written (filetrust) or that another build
// of gorun made (SameBuild) is refused. Its errors say how to get the
// right one.
func Tools() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: gorun cannot find its own executable to look next to it: %v", ErrNoTools, err)
	}
	p := filepath.Join(filepath.Dir(exe), ToolsBinary)
	if !pluginbin.IsExec(p) {
		return "", fmt.Errorf("%w: %s is not there (`make build`, or `go install ./cmd/...`, puts gorun-tools next to gorun)", ErrNoTools, p)
	}
	if err := filetrust.Check(p, filetrust.Companion); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoTools, err)
	}
	if err := SameBuild(p); err != nil {
		return "", fmt.Errorf("%w: %w (build gorun and gorun-tools together: `make build`, or `go install ./cmd/...`)", ErrNoTools, err)
	}
	return p, nil
}

// companionPath resolves ToolsProgram for an agent's launch: the
// gorun-tools next to this agent's gorun, as Tools checks it, or a
// message and exit status for the ranks' failure.
func companionPath() (path string, code int, msg string) {
	p, err := Tools()
	if err != nil {
		return "", 127, err.Error()
	}
	return p, 0, ""
}
