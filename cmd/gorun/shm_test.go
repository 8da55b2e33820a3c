package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testusers"
)

// The attack of the security review (row 5): a victim's job has a rank
// map, beside its own segments, files that are not the job's: the
// victim's own file from before the job (also through a symlink), another
// user's 0644 file, and another job's segment, made after the rank started
// by a process that still maps it. Then rank 1 fails, the agent kills rank
// 0 and sweeps /dev/shm; rank 0, told SIGTERM, swaps a directory it made
// for a symlink to the victim's home. Only the rank's own segment may go.
func TestShmSweepAttack(t *testing.T) {
	t.Parallel()
	victim := testusers.Create(t, "gshm")
	other := testusers.Create(t, "gshmo")
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "shmrank")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/shmrank").CombinedOutput(); err != nil {
		t.Fatalf("build shmrank: %v\n%s", err, out)
	}

	dev := "/dev/shm/" + victim.Name
	t.Cleanup(func() {
		m, _ := filepath.Glob(dev + "-*")
		for _, f := range m {
			os.RemoveAll(f)
		}
	})
	keep := filepath.Join(victim.Home, "keep")
	files := []struct {
		path  string
		owner *testusers.User
		mode  os.FileMode
	}{
		{dev + "-own", victim, 0o600},
		{dev + "-target", victim, 0o600},
		{dev + "-other", other, 0o644},
		{keep + "/seg", victim, 0o600},
	}
	os.Mkdir(keep, 0o700)
	os.Chown(keep, int(victim.UID), int(victim.GID))
	for _, f := range files {
		if err := os.WriteFile(f.path, []byte("precious\n"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f.path, int(f.owner.UID), int(f.owner.GID)); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(f.path, int64(os.Getpagesize())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(dev+"-target", dev+"-link"); err != nil {
		t.Fatal(err)
	}
	os.Lchown(dev+"-link", int(victim.UID), int(victim.GID))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, gorunBin, "-np", "2", bin, "rank", victim.Home, victim.Name)
	cmd.SysProcAttr, cmd.Env, cmd.Dir = victim.Credential(), victim.Env(), victim.Home
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if _, err := os.Stat(filepath.Join(victim.Home, "started")); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("gorun ended before rank 0 started (%v)\n%s%s", err, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Another job of the victim's makes its segment now, after the rank
	// started, and holds it mapped while the sweep runs.
	hold := victim.Command(bin, "hold", dev+"-job2")
	holdIn, err := hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	holdOut, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	hold.Stderr = os.Stderr
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer hold.Wait()
	defer holdIn.Close()
	if line, _ := bufio.NewReader(holdOut).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the other job's process said %q", line)
	}

	err = <-exited
	if ctx.Err() != nil {
		t.Fatalf("gorun did not finish within a minute\n%s%s", stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "rank 1 on localhost") {
		t.Fatalf("want exit 1 for rank 1's failure, got %v\n%s%s", err, stdout.String(), stderr.String())
	}

	for _, tt := range []struct {
		name, path string
		gone       bool
	}{
		{"the rank's own segment", dev + "-seg", true},
		{"the victim's file from before the job", dev + "-own", false},
		{"another user's 0644 file", dev + "-other", false},
		{"another job's segment", dev + "-job2", false},
		{"the symlink to the victim's file", dev + "-link", false},
		{"the victim's file behind the symlink", dev + "-target", false},
		{"the victim's file behind the swapped directory", keep + "/seg", false},
	} {
		_, err := os.Lstat(tt.path)
		if gone := os.IsNotExist(err); gone != tt.gone {
			t.Errorf("%s (%s): removed %v, want %v", tt.name, tt.path, gone, tt.gone)
		}
	}
	if fi, err := os.Lstat(dev + "-dir"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("rank 0 did not swap its directory for a symlink on SIGTERM: %v %v", fi, err)
	}
}
