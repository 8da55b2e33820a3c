// Package filetrust decides whether a file that gorun is about to run or
// read could have been written by someone else: a plugin binary, a
// configuration file. It follows OpenSSH's StrictModes ([Check]).
package filetrust

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrUnsafe is wrapped by the errors of a file that gorun refuses to run
// or read because a user other than this one or root could have written
// it or could replace it (see [Check]).
var ErrUnsafe = errors.New("unsafe file")

// A Use is what a checked file is for, as its errors say it.
type Use struct {
	Verb   string // what gorun would do with the file: "run", "read"
	Noun   string // what the file is: "plugin binary"
	Plural string // what others could add beside it: "plugins"
}

// The uses gorun checks files for.
var (
	// Plugin is a plugin binary that gorun runs (gorun-plugin-*,
	// gorun-pmix).
	Plugin = Use{Verb: "run", Noun: "plugin binary", Plural: "plugins"}
	// Companion is a program of gorun's own that gorun runs from next to
	// itself (gorun-tools).
	Companion = Use{Verb: "run", Noun: "companion program", Plural: "programs"}
	// Config is a TOML configuration file that gorun reads: its values
	// choose what every rank runs and where gorun writes.
	Config = Use{Verb: "read", Noun: "configuration file", Plural: "configuration files"}
)

// UnsafeError says why gorun refuses to run or read a file. It matches
// [ErrUnsafe] under errors.Is.
type UnsafeError struct {
	// Use is what the file was checked for.
	Use Use
	// File is the file as it was found or given.
	File string
	// Path is the file or directory at fault: File itself, a directory
	// on its way, or what a symbolic link on its way points to.
	Path string
	// Reason says what is wrong with Path, as in "is writable by others
	// (mode 0777)".
	Reason string
}

// Error returns "refusing to VERB FILE: PATH REASON".
func (e *UnsafeError) Error() string {
	return "refusing to " + e.Use.Verb + " " + e.File + ": " + e.Problem()
}

// Problem returns "PATH REASON", what gorun plugins list shows.
func (e *UnsafeError) Problem() string {
	return e.Path + " " + e.Reason
}

// Is reports whether target is ErrUnsafe.
func (e *UnsafeError) Is(target error) bool { return target == ErrUnsafe }

// maxLinks bounds the symbolic links Check follows, as the kernel's
// ELOOP does.
const maxLinks = 40

// Check returns an *UnsafeError when a user other than this process's
// (effective) user or root could have written the file at path or could
// replace it before gorun runs or reads it, and the error of Lstat or
// Readlink when a part of its path cannot be read (one that wraps
// fs.ErrNotExist for a file that is not there). These are OpenSSH's StrictModes rules
// for authorized_keys, applied from / down (sshd stops at the home
// directory):
//
//   - the file is a regular file owned by this user or root and writable
//     by neither its group nor others;
//   - every directory on its way, from /, is owned by this user or root
//     and writable by neither group nor others;
//   - symbolic links are followed one at a time, so that the directories
//     holding them are checked as well, and a link is only as safe as the
//     directory it is in.
//
// One exception: a directory that others may write but whose sticky bit
// is set (/tmp, /var/tmp) may be passed through, when the entry taken in
// it is owned by this user or root, since the sticky bit keeps others
// from renaming or removing that entry. That is why a plugin under
// $TMPDIR/mine (mode 0700) is accepted. It does not apply to the
// directory that holds the file itself: there others could add files of
// their own (a plugin, a ./gorun.toml before the user's first run there),
// so a directory writable by others is refused for the file it holds even
// when it is sticky.
//
// Group-writability is refused even for a group that has no member but
// this user (the per-user groups and umask 002 of Debian and Ubuntu,
// which Debian's sshd tolerates): gorun cannot list a group's members
// reliably, so the error says to run chmod g-w.
//
// git's safe.directory follows the same idea for a repository's
// configuration: a file that another user could have put there is not
// used.
func Check(path string, use Use) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	w := walk{use: use, file: path, uid: uint32(os.Geteuid())}
	return w.run(abs)
}

// walk resolves a path one component at a time from /, checking each
// directory passed through and the final file.
type walk struct {
	use  Use
	file string // as given, for errors
	uid  uint32
}

func (w *walk) unsafe(p, format string, args ...any) error {
	return &UnsafeError{Use: w.use, File: w.file, Path: p, Reason: fmt.Sprintf(format, args...)}
}

func (w *walk) run(abs string) error {
	cur := "/"
	st, err := lstat(cur)
	if err != nil {
		return err
	}
	curSt := st
	rest := splitPath(abs)
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if cur != "/" {
				cur = filepath.Dir(cur)
				if curSt, err = lstat(cur); err != nil {
					return err
				}
			}
			continue
		}
		if err := w.checkDir(cur, curSt); err != nil {
			return err
		}
		next := filepath.Join(cur, name)
		st, err := lstat(next)
		if err != nil {
			return err
		}
		last := len(rest) == 0
		if err := w.checkEntry(cur, curSt, next, st, last); err != nil {
			return err
		}
		switch {
		case st.mode&syscall.S_IFMT == syscall.S_IFLNK:
			if links++; links > maxLinks {
				return w.unsafe(next, "has more than %d symbolic links on its way", maxLinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				cur = "/"
				if curSt, err = lstat(cur); err != nil {
					return err
				}
			}
			rest = append(splitPath(target), rest...)
		case last:
			return w.checkFile(next, st)
		case st.mode&syscall.S_IFMT != syscall.S_IFDIR:
			return &os.PathError{Op: "lstat", Path: next, Err: syscall.ENOTDIR}
		default:
			cur, curSt = next, st
		}
	}
	// The path ended in "/", "." or "..": a directory.
	return w.unsafe(cur, "is a directory, not a %s", w.use.Noun)
}

// checkDir checks directory dir on the way: its owner, and that it is not
// writable by group or others, unless it is sticky (checkEntry then
// checks the entry taken in it).
func (w *walk) checkDir(dir string, st stat) error {
	if !w.ours(st.uid) {
		return w.unsafe(dir, "is owned by %s, not by you or root", owner(st.uid))
	}
	if st.mode&0o022 != 0 && st.mode&syscall.S_ISVTX == 0 {
		return w.unsafe(dir, "is writable by %s (mode %04o)", writers(st.mode), st.mode&0o7777)
	}
	return nil
}

// checkEntry checks the entry p (its stat st) taken in directory dir:
// where others may write dir (sticky, or checkDir would have refused it),
// the entry must be this user's or root's, and dir must not be where
// the file itself, or the last link to it, is (last).
func (w *walk) checkEntry(dir string, dirSt stat, p string, st stat, last bool) error {
	if dirSt.mode&0o022 == 0 {
		return nil
	}
	if last {
		return w.unsafe(dir, "is writable by %s (mode %04o): its sticky bit keeps others from replacing your files there, but not from adding %s of their own; keep %s in a directory that only you (or root) can write",
			writers(dirSt.mode), dirSt.mode&0o7777, w.use.Plural, w.use.Plural)
	}
	if !w.ours(st.uid) {
		return w.unsafe(p, "is owned by %s, in %s, which others can write (mode %04o)", owner(st.uid), dir, dirSt.mode&0o7777)
	}
	return nil
}

// checkFile checks the file itself.
func (w *walk) checkFile(p string, st stat) error {
	switch {
	case st.mode&syscall.S_IFMT != syscall.S_IFREG:
		return w.unsafe(p, "is not a regular file")
	case !w.ours(st.uid):
		return w.unsafe(p, "is owned by %s, not by you or root", owner(st.uid))
	case st.mode&0o022 != 0:
		return w.unsafe(p, "is writable by %s (mode %04o); chmod go-w it", writers(st.mode), st.mode&0o7777)
	}
	return nil
}

func (w *walk) ours(uid uint32) bool { return uid == w.uid || uid == 0 }

// stat is what the walk needs of a file's status.
type stat struct {
	mode uint32
	uid  uint32
}

func lstat(p string) (stat, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return stat{}, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	return stat{mode: st.Mode, uid: st.Uid}, nil
}

// splitPath splits p at its slashes; an absolute p gives a first "".
func splitPath(p string) []string { return strings.Split(p, "/") }

// writers says who may write a file of mode m besides its owner.
func writers(m uint32) string {
	if m&0o002 != 0 {
		return "others"
	}
	return "its group"
}

// owner names user uid, "user NAME (uid N)" or "uid N".
func owner(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return "user " + u.Username + " (uid " + id + ")"
	}
	return "uid " + id
}
