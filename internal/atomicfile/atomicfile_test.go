package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// A file is replaced whole, with the mode asked (0600 by default), and
// no temporary file is left, also when the write fails.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, tt := range []struct {
		data string
		o    Options
		mode os.FileMode
	}{
		{"one", Options{}, 0o600},
		{"two", Options{Mode: 0o644, Sync: true}, 0o644},
	} {
		if err := Write(p, []byte(tt.data), tt.o); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(b) != tt.data || fi.Mode().Perm() != tt.mode {
			t.Errorf("content %q mode %v, want %q %v", b, fi.Mode().Perm(), tt.data, tt.mode)
		}
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), Options{}); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left: %v", ents)
	}
}
