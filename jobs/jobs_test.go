package jobs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func publish(t *testing.T, dir, id string, h Handler) *Server {
	t.Helper()
	host, _ := os.Hostname()
	s, err := Publish(dir, Info{ID: id, Host: host, Argv: []string{"./train"}, Ranks: 4, Started: time.Now()}, []string{"127.0.0.1"}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func echo(_ context.Context, r Request) (any, error) {
	if r.Op == "fail" {
		return nil, os.ErrPermission
	}
	return map[string]any{"op": r.Op, "verbose": r.Verbose}, nil
}

// A published job is found in its directory, answers with its key, and
// its file is private and gone once it closes.
func TestPublishCallClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	s := publish(t, dir, "abc123", echo)
	fi, err := os.Stat(filepath.Join(dir, "abc123.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("job file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("job directory mode %v, want 0700", di.Mode().Perm())
	}
	info, err := Find(dir, "abc")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := Call(context.Background(), info, Request{Op: "status", Verbose: true}, &got); err != nil {
		t.Fatal(err)
	}
	if got["op"] != "status" || got["verbose"] != true {
		t.Errorf("answer %v", got)
	}
	if err := Call(context.Background(), info, Request{Op: "fail"}, nil); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("handler error: %v", err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "abc123.json")); !os.IsNotExist(err) {
		t.Errorf("job file left after Close: %v", err)
	}
	if _, err := Find(dir, "abc"); err == nil {
		t.Error("a closed job is still found")
	}
}

// Without the job's key, or to a socket that is not the job's, nothing
// is answered.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	called := false
	publish(t, dir, "k1", func(ctx context.Context, r Request) (any, error) { called = true; return 1, nil })
	info, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	bad := info
	bad.Key = strings.Repeat("00", 32)
	if err := Call(context.Background(), bad, Request{Op: "stacks"}, nil); err == nil || !strings.Contains(err.Error(), "wrong key") {
		t.Errorf("wrong key: %v", err)
	}
	bad = info
	bad.Cert = strings.Repeat("ab", 32)
	if err := Call(context.Background(), bad, Request{Op: "stacks"}, nil); err == nil || !strings.Contains(err.Error(), "not the job's") {
		t.Errorf("wrong certificate: %v", err)
	}
	if called {
		t.Error("the handler ran for a refused request")
	}
}

// A job file whose head is gone is stale, and Find skips it; a second
// running job makes an empty id ambiguous.
func TestStaleAndAmbiguous(t *testing.T) {
	dir := t.TempDir()
	publish(t, dir, "live1", echo)
	host, _ := os.Hostname()
	dead := Info{ID: "dead1", PID: 1 << 22, Host: host, Addrs: []string{"127.0.0.1:1"}, Started: time.Now()}
	b, _ := json.Marshal(dead)
	os.WriteFile(filepath.Join(dir, "dead1.json"), b, 0o600)
	os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o600)
	all, err := List(dir)
	if len(all) != 2 || err == nil || !strings.Contains(err.Error(), "junk.json") {
		t.Fatalf("List: %d jobs, %v", len(all), err)
	}
	for _, in := range all {
		if got := Stale(in); got != (in.ID == "dead1") {
			t.Errorf("Stale(%s) = %v", in.ID, got)
		}
	}
	if in, err := Find(dir, ""); err != nil || in.ID != "live1" {
		t.Errorf("Find: %v %v", in.ID, err)
	}
	publish(t, dir, "live2", echo)
	if _, err := Find(dir, ""); err == nil || !strings.Contains(err.Error(), "2 jobs are running") {
		t.Errorf("two jobs: %v", err)
	}
	if _, err := Find(dir, "nope"); err == nil || !strings.Contains(err.Error(), `no running job "nope"`) {
		t.Errorf("unknown id: %v", err)
	}
}

// A directory open to others is made private before a key goes in it.
func TestDirMadePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	publish(t, dir, "p1", echo)
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("mode %v", di.Mode().Perm())
	}
}

func TestWriteList(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	WriteList(&b, []Info{
		{ID: "a1", State: "running", Ranks: 16, Hosts: []string{"h1", "h2", "h3", "h4"}, Started: now.Add(-3*time.Minute - 5*time.Second), Host: "login", PID: 42, Argv: []string{"./train", "--lr", "0.1"}},
		{ID: "b2", State: "starting", Ranks: 2, Hosts: []string{"localhost"}, Started: now.Add(-2 * time.Second), Host: "login", PID: 43, Argv: []string{"true"}},
	}, now)
	want := `JOB  STATE     RANKS  HOSTS          AGE    HEAD      COMMAND
a1   running   16     h1,h2,... (4)  3m05s  login:42  ./train --lr 0.1
b2   starting  2      localhost      2s     login:43  true
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	for d, w := range map[time.Duration]string{59 * time.Second: "59s", 2*time.Hour + 7*time.Minute: "2h07m", 76 * time.Hour: "3d04h"} {
		if got := Age(d); got != w {
			t.Errorf("Age(%v) = %s, want %s", d, got, w)
		}
	}
}

// Jobs of one user share the identity made by the first, which only the
// user can read; a damaged one is made anew, and the jobs still answer.
func TestIdentityReused(t *testing.T) {
	dir := t.TempDir()
	a := publish(t, dir, "i1", echo).Info()
	b := publish(t, dir, "i2", echo).Info()
	if a.Cert != b.Cert || a.Key == b.Key {
		t.Errorf("certificates %s %s, keys equal: %v", a.Cert, b.Cert, a.Key == b.Key)
	}
	fi, err := os.Stat(filepath.Join(dir, identityFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v %v", fi, err)
	}
	os.WriteFile(filepath.Join(dir, identityFile), []byte("junk"), 0o600)
	c := publish(t, dir, "i3", echo).Info()
	if c.Cert == a.Cert {
		t.Error("a damaged identity was not replaced")
	}
	if err := Call(context.Background(), c, Request{Op: "x"}, nil); err != nil {
		t.Error(err)
	}
	if err := Call(context.Background(), a, Request{Op: "x"}, nil); err != nil {
		t.Errorf("an older job no longer answers: %v", err)
	}
}
