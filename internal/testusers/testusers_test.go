package testusers

import (
	"os"
	"strings"
	"testing"
)

// A throwaway user exists with a private home while the test runs, runs
// commands as itself, and cannot read another's home.
func TestCreate(t *testing.T) {
	a, b := Create(t, "gtu"), Create(t, "gtu")
	if a.UID == 0 || a.UID == b.UID || a.Home == b.Home {
		t.Fatalf("users %+v %+v", a, b)
	}
	out, err := a.Command("id", "-un").Output()
	if err != nil || strings.TrimSpace(string(out)) != a.Name {
		t.Fatalf("id as %s: %q %v", a.Name, out, err)
	}
	if err := b.Command("ls", a.Home).Run(); err == nil {
		t.Errorf("%s read %s's home", b.Name, a.Name)
	}
	st, err := os.Stat(a.Home)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("home %s: %v %v", a.Home, st.Mode(), err)
	}
}
