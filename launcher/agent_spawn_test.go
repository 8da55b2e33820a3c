package launcher

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// A rank that cannot be forked is reported with the shells' status.
func TestForkExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"missing", syscall.ENOENT, ExitNotFound},
		{"wrapped missing", &os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOENT}, ExitNotFound},
		{"permission denied", syscall.EACCES, ExitNotExec},
		{"not an executable format", fmt.Errorf("exec: %w", syscall.ENOEXEC), ExitNotExec},
		{"anything else", syscall.EMFILE, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := forkExitCode(tt.err); got != tt.want {
				t.Fatalf("forkExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}
