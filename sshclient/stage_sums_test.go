package sshclient

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The sum of a staged file is kept on disk between gorun runs, under the
// file's identity (path, inode, size, modification and change times): a
// later run takes it without reading the file, and a changed file is
// hashed again.
func TestLocalHashKeptOnDisk(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	defer func(d time.Duration) { sumSettle = d }(sumSettle)
	sumSettle = 0
	f := filepath.Join(t.TempDir(), "gorun")
	if err := os.WriteFile(f, []byte("build one"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := func(content string) string {
		h := sha256.Sum256([]byte(content))
		return hex.EncodeToString(h[:])
	}
	fresh := func() string { // as a new gorun process would
		t.Helper()
		exeHashes.Clear()
		sum, err := localHash(f)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if got := fresh(); got != want("build one") {
		t.Fatalf("first sum %s, want %s", got, want("build one"))
	}
	kept, _ := filepath.Glob(filepath.Join(cache, "gorun", "sums", "*"))
	if len(kept) != 1 {
		t.Fatalf("kept sums: %v, want one", kept)
	}
	// A later run reads the kept sum, not the file: a planted one shows it.
	planted := strings.Repeat("ab", sha256.Size)
	if err := os.WriteFile(kept[0], []byte(planted), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := fresh(); got != planted {
		t.Errorf("a later run's sum %s, want the kept one", got)
	}
	// Not a sum: ignored, and the file hashed.
	if err := os.WriteFile(kept[0], []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := fresh(); got != want("build one") {
		t.Errorf("with a damaged kept sum: %s, want the file's", got)
	}
	// A new build of the same size, past the clock's tick: hashed again.
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(f, []byte("build two"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := fresh(); got != want("build two") {
		t.Errorf("after a rebuild: %s, want %s", got, want("build two"))
	}
	// A file changed just now is hashed, and its sum not kept.
	sumSettle = time.Hour
	before, _ := filepath.Glob(filepath.Join(cache, "gorun", "sums", "*"))
	if err := os.WriteFile(f, []byte("build 3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := fresh(); got != want("build 3") {
		t.Errorf("a fresh file: %s, want %s", got, want("build 3"))
	}
	if after, _ := filepath.Glob(filepath.Join(cache, "gorun", "sums", "*")); len(after) != len(before) {
		t.Errorf("a fresh file's sum was kept: %d sums, were %d", len(after), len(before))
	}
}
