package launcher

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// shmTestDir makes a directory in /dev/shm (tmpfs, where the sweep works)
// that the test removes when it ends.
func shmTestDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(shmDir, "gorun-shmtest-")
	if err != nil {
		t.Skipf("no %s here: %v", shmDir, err)
	}
	t.Cleanup(func() {
		os.RemoveAll(d)
		os.RemoveAll(d + ".real")
	})
	return d
}

// makeFile makes a page-sized file at path.
func makeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, os.Getpagesize()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mapFile maps path shared, as a rank maps a segment, and returns a
// function that unmaps it; open keeps a descriptor of it open until the
// test ends.
func mapFile(t *testing.T, path string, open bool) (unmap func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if open {
		t.Cleanup(func() { f.Close() })
	} else {
		defer f.Close()
	}
	m, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	mapped := true
	unmap = func() {
		if mapped {
			mapped = false
			unix.Munmap(m)
		}
	}
	t.Cleanup(unmap)
	return unmap
}

// hasBtime says whether dir's file system records birth times.
func hasBtime(t *testing.T, dir string) bool {
	t.Helper()
	var x unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_BTIME, &x); err != nil {
		return false
	}
	return x.Mask&unix.STATX_BTIME != 0
}

// The sweep removes a file that a killed rank made and mapped, and keeps
// every other file that a rank had mapped: the user's own from before the
// job, another user's, one that another process still maps or holds open,
// one in a subdirectory, one whose name now is another file or a symlink,
// and everything when the directory itself became a symlink. This test
// process plays the rank (its own maps are noted) and the process outside
// the job.
func TestShmSweep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// where the rank maps, relative to the swept directory
		file string
		// made before the ranks start: the user's own file
		pre bool
		// made before the ranks start in sub/, renamed to file afterwards
		renamedIn bool
		// given to another user (needs root)
		otherUser bool
		// still mapped, or held open, by a live process at the sweep
		mapped, open bool
		// after the kill: the name is given to a new file, or to a
		// symlink to the old one, or the directory becomes a symlink
		replaced, nameSymlink, dirSymlink bool
		gone                              bool
	}{
		{name: "made by the rank", file: "seg", gone: true},
		{name: "the user's own from before", file: "seg", pre: true},
		{name: "renamed in from before", file: "seg", renamedIn: true},
		{name: "another user's", file: "seg", otherUser: true},
		{name: "mapped by another process", file: "seg", mapped: true},
		{name: "held open by another process", file: "seg", open: true},
		{name: "in a subdirectory", file: "sub/seg"},
		{name: "name given to another file", file: "seg", replaced: true},
		{name: "name became a symlink", file: "seg", nameSymlink: true},
		{name: "directory became a symlink", file: "seg", dirSymlink: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := shmTestDir(t)
			if tt.renamedIn && !hasBtime(t, d) {
				t.Skip("no birth times here: only /dev/shm's listing tells a file from before")
			}
			if tt.otherUser && os.Geteuid() != 0 {
				t.Skip("giving a file to another user needs root")
			}
			path := filepath.Join(d, tt.file)
			if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.pre:
				makeFile(t, path)
			case tt.renamedIn:
				makeFile(t, filepath.Join(d, "sub", "old"))
				// Born a coarse clock's tick or more before the ranks.
				time.Sleep(20 * time.Millisecond)
			}
			s := &shmSweep{dir: d}
			s.begin()
			switch {
			case tt.renamedIn:
				if err := os.Rename(filepath.Join(d, "sub", "old"), path); err != nil {
					t.Fatal(err)
				}
			case !tt.pre:
				makeFile(t, path)
			}
			if tt.otherUser {
				if err := os.Chown(path, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			unmap := mapFile(t, path, tt.open)
			s.note(os.Getpid())
			if tt.file == "seg" && len(s.left) != 1 {
				t.Fatalf("noted %v, want %s", s.left, tt.file)
			}
			if !tt.mapped {
				unmap()
			}
			switch {
			case tt.replaced:
				os.Remove(path)
				makeFile(t, path)
			case tt.nameSymlink:
				os.Rename(path, path+".real")
				os.Symlink(path+".real", path)
				path += ".real"
			case tt.dirSymlink:
				os.Rename(d, d+".real")
				os.Symlink(d+".real", d)
				path = filepath.Join(d+".real", tt.file)
			}
			removed := s.sweep()
			_, err := os.Lstat(path)
			if gone := os.IsNotExist(err); gone != tt.gone {
				t.Errorf("%s: removed %v (want %v); the sweep removed %q", path, gone, tt.gone, removed)
			}
			if tt.gone && !slices.Equal(removed, []string{"seg"}) {
				t.Errorf("removed %q, want [seg]", removed)
			}
			if s.left != nil {
				t.Errorf("left %v after the sweep", s.left)
			}
		})
	}
}

// begin lists the directory's inodes, so that a file from before the job
// is known without birth times.
func TestShmBegin(t *testing.T) {
	t.Parallel()
	d := shmTestDir(t)
	var want []uint64
	for _, name := range []string{"a", "b", "c"} {
		makeFile(t, filepath.Join(d, name))
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(d, name), &st); err != nil {
			t.Fatal(err)
		}
		want = append(want, st.Ino)
	}
	s := &shmSweep{dir: d}
	s.begin()
	for _, ino := range want {
		if !s.before[ino] {
			t.Errorf("inode %d is not in %v", ino, s.before)
		}
	}
	if len(s.before) != len(want)+2 { // and . and ..
		t.Errorf("before = %v, want %v, . and ..", s.before, want)
	}
	s = &shmSweep{dir: filepath.Join(d, "missing")}
	s.begin()
	if s.before != nil {
		t.Errorf("a missing directory lists %v", s.before)
	}
}

// A file counts as made during the generation when its inode was not in
// the directory at begin and, where the file system has birth times, it
// was not born before.
func TestShmMadeDuring(t *testing.T) {
	t.Parallel()
	since := time.Unix(1_700_000_000, 500)
	dev := shmDev{0, 26}
	s := &shmSweep{since: since, dev: dev, before: map[uint64]bool{7: true}}
	stx := func(ino uint64, btime *time.Time) *unix.Statx_t {
		x := &unix.Statx_t{Mask: unix.STATX_INO, Ino: ino, Dev_major: dev.major, Dev_minor: dev.minor}
		if btime != nil {
			x.Mask |= unix.STATX_BTIME
			x.Btime = unix.StatxTimestamp{Sec: btime.Unix(), Nsec: uint32(btime.Nanosecond())}
		}
		return x
	}
	at := func(d time.Duration) *time.Time { t := since.Add(d); return &t }
	other := stx(8, nil)
	other.Dev_minor = 27
	tests := []struct {
		name string
		s    *shmSweep
		x    *unix.Statx_t
		want bool
	}{
		{"new, no birth time", s, stx(8, nil), true},
		{"listed, no birth time", s, stx(7, nil), false},
		{"new, born after", s, stx(8, at(time.Millisecond)), true},
		{"new, born at the same instant", s, stx(8, at(0)), true},
		{"new, born a nanosecond before", s, stx(8, at(-1)), false},
		{"listed, born after", s, stx(7, at(time.Second)), false},
		{"another device", s, other, false},
		{"directory unlisted", &shmSweep{since: since, dev: dev}, stx(8, at(time.Second)), false},
	}
	for _, tt := range tests {
		if got := tt.s.madeDuring(tt.x); got != tt.want {
			t.Errorf("%s: madeDuring = %v, want %v", tt.name, got, tt.want)
		}
	}
}
