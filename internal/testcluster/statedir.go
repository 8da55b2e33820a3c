package testcluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// PrepareDir makes the state directory of fixture name (which prefixes
// errors) and returns its absolute, resolved path. dir "" means a new
// directory "gorun-NAME-*" under os.TempDir(). A given dir must be absent,
// empty, or hold a previous cluster, which downOld tears down first:
// downOld(dir) returns nil when dir holds no cluster. The directory gets
// mode perm.
func PrepareDir(name, dir string, perm os.FileMode, downOld func(dir string) error) (_ string, err error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "gorun-"+name+"-")
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		defer func() {
			if err != nil {
				os.Remove(d)
			}
		}()
		dir = d
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		dir = abs
		if err := downOld(dir); err != nil {
			return "", fmt.Errorf("%s: tearing down the previous cluster in %s: %w", name, dir, err)
		}
		if err := os.MkdirAll(dir, perm); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if len(ents) != 0 {
			return "", fmt.Errorf("%s: state directory %s is not empty and holds no cluster; give an absent or empty one", name, dir)
		}
	}
	if err := os.Chmod(dir, perm); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return real, nil
}

// RemoveDir detaches every mount at or under dir (see Unmount), then
// removes dir and everything in it. If a mount is left, nothing is
// removed.
func RemoveDir(dir string) error {
	if err := Unmount(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the state directory: %w", err)
	}
	return nil
}

// Mounts returns the mount points at or under dir in this mount namespace,
// deepest first.
func Mounts(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list mounts: %w", err)
	}
	defer f.Close()
	var mps []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 5 {
			continue
		}
		mp := unescapeMount(fs[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mps = append(mps, mp)
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("/proc/self/mountinfo: %w", err)
	}
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	return mps, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Unmount detaches every mount at or under dir, so that removing dir never
// reaches into a mounted file system, and checks that none is left.
func Unmount(dir string) error {
	mps, err := Mounts(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
	if len(mps) == 0 {
		return nil
	}
	if left, err := Mounts(dir); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("could not unmount %s; %s not removed", strings.Join(left, ", "), dir)
	}
	return nil
}
