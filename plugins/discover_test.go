package plugins

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/testusers"
)

// Discover marks a refused plugin, which shadows a later one of the same
// name (as Lookup refuses it rather than take the later one), and Find
// refuses gorun-pmix next to gorun when it is unsafe.
func TestDiscoverAndFindRefuse(t *testing.T) {
	root := t.TempDir()
	bad := testusers.Dir(t, filepath.Join(root, "bad"), 0o777)
	good := testusers.Dir(t, filepath.Join(root, "good"), 0o755)
	for _, d := range []string{bad, good} {
		if err := os.WriteFile(filepath.Join(d, BinaryPrefix+"x"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "gorun-pmix"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cs := Discover([]string{bad, good})
	if len(cs) != 2 || !strings.HasPrefix(cs[0].Problem, "refused: "+bad+" is writable by others") || !cs[1].Shadowed {
		t.Errorf("Discover = %+v", cs)
	}
	if p, err := Lookup("x", []string{bad, good}); !errors.Is(err, ErrUnsafe) || p != filepath.Join(bad, BinaryPrefix+"x") {
		t.Errorf("Lookup = %q, %v", p, err)
	}
	if p, _, err := Find("gorun-pmix", bad, good); !errors.Is(err, ErrUnsafe) || p != filepath.Join(bad, "gorun-pmix") {
		t.Errorf("Find = %q, %v", p, err)
	}
	if p, _, err := Find("gorun-pmix", good); err != nil || p != filepath.Join(good, "gorun-pmix") {
		t.Errorf("Find = %q, %v", p, err)
	}
}
