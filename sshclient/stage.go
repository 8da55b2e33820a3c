package sshclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gorun/gorun/internal/atomicfile"
)

// exeHashes caches the sha256 of local files, keyed by the file's
// identity (fileKey), in this process; sums on disk (savedSum) keep them
// from one gorun to the next.
var exeHashes sync.Map // string -> *hashEntry

type hashEntry struct {
	once sync.Once
	sum  string
	err  error
}

func localHash(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key, lasting := fileKey(path, st)
	v, _ := exeHashes.LoadOrStore(key, &hashEntry{})
	e := v.(*hashEntry)
	e.once.Do(func() {
		if lasting {
			if e.sum = savedSum(key); e.sum != "" {
				return
			}
		}
		f, err := os.Open(path)
		if err != nil {
			e.err = err
			return
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			e.err = err
			return
		}
		e.sum = hex.EncodeToString(h.Sum(nil))
		if lasting {
			saveSum(key, e.sum)
		}
	})
	if e.err != nil {
		exeHashes.CompareAndDelete(key, e) // not kept: the next call tries again
	}
	return e.sum, e.err
}

// fileKey names a file's content as the kernel keeps it: its path, device,
// inode, size, and modification and change times. Any write, rename over
// it or chmod changes the change time, which no user can set, so an
// unchanged key is an unchanged file. lasting says the key has them all,
// and the file has settled, so that the key may name a sum kept on disk.
func fileKey(path string, st os.FileInfo) (key string, lasting bool) {
	key = fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return key, false
	}
	key += fmt.Sprintf("\x00%d\x00%d\x00%d.%d", sys.Dev, sys.Ino, sys.Ctim.Sec, sys.Ctim.Nsec)
	// The kernel stamps files from a coarse clock: a file changed again
	// within a tick of the change that made its key keeps the key. One
	// that changed that recently is hashed, and its sum not kept.
	changed := time.Unix(sys.Ctim.Sec, sys.Ctim.Nsec)
	return key, time.Since(changed) >= sumSettle && time.Since(st.ModTime()) >= sumSettle
}

// sumSettle is how long a file must have been left alone for its sum to
// be kept on disk.
var sumSettle = 2 * time.Second

// sumsDir is where the sums of the files gorun stages are kept between
// runs (hashing gorun's 27 MB took 21 ms of every SSH launch); "" when
// the user has no cache directory.
func sumsDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "gorun", "sums")
}

// sumFile is where key's sum is kept: a file named by the key's hash.
func sumFile(key string) string {
	dir := sumsDir()
	if dir == "" {
		return ""
	}
	h := sha256.Sum256([]byte(key))
	return filepath.Join(dir, hex.EncodeToString(h[:16]))
}

// savedSum is the sum kept for key, "" if there is none (or it is not a
// sha256 in hex).
func savedSum(key string) string {
	f := sumFile(key)
	if f == "" {
		return ""
	}
	b, err := os.ReadFile(f)
	if err != nil || len(b) != 2*sha256.Size {
		return ""
	}
	if _, err := hex.DecodeString(string(b)); err != nil {
		return ""
	}
	return string(b)
}

// saveSum keeps sum for key (best effort: a failure costs the next run a
// hash, nothing else).
func saveSum(key, sum string) {
	f := sumFile(key)
	if f == "" || os.MkdirAll(filepath.Dir(f), 0o700) != nil {
		return
	}
	_ = atomicfile.Write(f, []byte(sum), atomicfile.Options{})
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shCommand wraps a POSIX sh script so that it runs under sh whatever the
// remote user's login shell is. The script becomes one line, since csh does
// not allow a newline inside quotes.
func shCommand(script string) string {
	var lines []string
	for _, l := range strings.Split(script, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return "exec /bin/sh -c " + shQuote(strings.Join(lines, "; "))
}

// cacheDir is the staging cache, under the remote $HOME: Stage copies gorun
// into cacheDir/<first 16 hex of its sha256>/gorun.
const cacheDir = "/.cache/gorun/bin/"

// checkFunc defines the sh function k, which checks the files named by its
// arguments (those that exist; the others are skipped) as sshd's
// StrictModes checks authorized_keys and the directories above it: it
// prints a line "gorun-unsafe PATH<TAB>REASON" for each that is a symbolic
// link, is owned by neither this user nor root, or is writable by its
// group or others (even when sticky), and nothing when all are safe.
//
// The shell's own tests find the links and whether each file is this
// user's ([ -O ], which dash, bash, busybox and BSD sh have); one find
// reads the modes. Only when a file is not this user's does k run id, to
// let find tell root's from another user's; find forks printf only to
// print a refusal. So the check of a sound cache costs one process.
//
// Given every component of a path from $HOME (physical) down, k's silence
// means that no other user can change what the path names: not the file,
// not any directory on the way. That is what makes a check in one shell
// hold for the exec that follows it in that shell.
const checkFunc = `k() { o=; for a; do shift; if [ -L "$a" ]; then printf 'gorun-unsafe %s\tis a symbolic link\n' "$a"; elif [ -e "$a" ]; then set -- "$@" "$a"; [ -O "$a" ] || o=1; fi; done; if [ $# -eq 0 ]; then return 0; fi; set -- "$@" -prune \(; if [ -n "$o" ]; then set -- "$@" \( ! -user "$(id -u)" ! -user 0 -exec printf 'gorun-unsafe %s\tis owned by another user\n' {} \; \) -o; fi; find "$@" \( -perm -002 -exec printf 'gorun-unsafe %s\tis writable by others\n' {} \; \) -o \( -perm -020 -exec printf 'gorun-unsafe %s\tis writable by its group\n' {} \; \) \) 2>&1; }
`

// unsafePrefix starts checkFunc's lines.
const unsafePrefix = "gorun-unsafe "

// chainArgs returns checkFunc's arguments, in sh, for the cache directory
// short under home (an sh expression, such as "$H", for a path without a
// trailing slash): home, each directory below it down to short, and the
// files names in short.
func chainArgs(home, short string, names ...string) string {
	p := home
	args := []string{`"` + p + `"`}
	for _, d := range append(strings.Split(strings.Trim(cacheDir, "/"), "/"), short) {
		p += "/" + d
		args = append(args, `"`+p+`"`)
	}
	for _, n := range names {
		args = append(args, `"`+p+"/"+n+`"`)
	}
	return strings.Join(args, " ")
}

// UnsafeCacheError means that gorun will not copy itself into, or run a
// copy from, the staging cache of a remote host, because a user other than
// the remote user (or root) could change what is there: Path, a component
// of $HOME/.cache/gorun/bin/<hash>/gorun from $HOME down, is a symbolic
// link, is owned by another user, or is writable by its group or others.
type UnsafeCacheError struct {
	Path   string
	Reason string // "is a symbolic link", "is writable by others", ...
}

// Error returns "PATH REASON".
func (e *UnsafeCacheError) Error() string { return e.Path + " " + e.Reason }

// UnsafeHint says how to mend the cache of an UnsafeCacheError (the hint
// of Stage's HostError).
const UnsafeHint = "gorun copies itself only where nobody but you and root can change the copy: " +
	"$HOME and each directory of ~/.cache/gorun/bin/<hash> must be yours, not a symbolic link, and writable by neither group nor others " +
	"(chmod go-w it, or remove it and gorun makes it again, mode 0700)"

// ParseUnsafe reads a refusal line of the staging checks, as the command of
// StagedCommand prints it on its standard error before it exits 126.
func ParseUnsafe(line string) (*UnsafeCacheError, bool) {
	rest, ok := strings.CutPrefix(line, unsafePrefix)
	if !ok {
		return nil, false
	}
	i := strings.LastIndexByte(rest, '\t')
	if i < 0 {
		return nil, false
	}
	return &UnsafeCacheError{Path: rest[:i], Reason: rest[i+1:]}, true
}

// StagedCommand returns the command line (for an SSH session, whatever the
// login shell) that runs the copy of gorun at path that Stage staged, with
// args. In the same sh, before the exec, it checks each component from the
// remote $HOME down to the file as Stage did before it copied (see
// UnsafeCacheError): that check holds until the exec, since no other user
// can change any of them, so the file that runs is the file that was
// checked, without hashing it again. It exits 127 when path is not an
// executable file, and 126 after a ParseUnsafe line on its standard error
// when a component is unsafe. The check costs one short process (find) on
// the host, and no round trip.
func StagedCommand(path string, args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "if [ ! -x %s ]; then exit 127; fi\n", shQuote(path))
	b.WriteString(checkFunc)
	home, rest, ok := strings.Cut(path, cacheDir)
	short, name, _ := strings.Cut(rest, "/")
	if !ok || short == "" || name == "" || strings.Contains(name, "/") || strings.Contains(rest, cacheDir) {
		// Not a path that Stage returns: its directory and itself.
		fmt.Fprintf(&b, "P=%s\nr=$(k \"${P%%/*}\" \"$P\")\n", shQuote(path))
	} else {
		fmt.Fprintf(&b, "H=%s\nP=%s\nr=$(k %s)\n", shQuote(home), shQuote(path), chainArgs("$H", short, name))
	}
	b.WriteString(`if [ -n "$r" ]; then printf '%s\n' "$r" >&2; exit 126; fi` + "\n")
	b.WriteString(`exec "$P"`)
	for _, a := range args {
		b.WriteString(" " + shQuote(a))
	}
	return shCommand(b.String())
}

// StartCommand returns the command line (for an SSH session, whatever the
// login shell) that runs wantPath with args on a host where wantPath is an
// executable file, and else, in the same shell, with no round trip and
// without hashing anything there, the copy of localExe that an earlier
// Stage left in the host's staging cache: when the stamp that Stage wrote
// next to it when it copied or hashed it vouches that it is still that
// file (the same sha256 as localExe, and the same inode, size,
// modification and change times), when each of the extra files is there
// with such a stamp (and executable there when it is here), and when
// nobody but the user and root can change any of them nor a directory
// above them up to $HOME (checked as StagedCommand checks the copy, in the
// same shell, before the exec). Otherwise it exits 127, saying nothing:
// the caller then calls Stage, which copies what is missing, or says why
// it will not. localExe and extra are hashed here (once per process and
// file); an error names the file that cannot be read.
//
// So a job on hosts that got gorun from an earlier run costs one session
// per host, as on hosts that share the head's gorun, instead of three
// (wantPath, Stage's probe, StagedCommand) and a hash of every file on
// every host.
func StartCommand(wantPath, localExe string, extra []string, args ...string) (string, error) {
	sum, err := localHash(localExe)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", localExe, err)
	}
	short := sum[:16]
	needGlibc, loader, err := GlibcNeeds(localExe)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "if [ -f %s ] && [ -x %s ]; then exec %s%s; fi\n", shQuote(wantPath), shQuote(wantPath), shQuote(wantPath), quoteArgs(args))
	if needGlibc != "" && loader != "" {
		// As Stage: a copy of a build that needs a newer glibc than the
		// host's, or a dynamic loader that it lacks, is Stage's to judge.
		fmt.Fprintf(&b, startGlibc, shQuote(loader), shQuote(needGlibc))
	}
	b.WriteString(checkFunc)
	b.WriteString(stampFunc)
	b.WriteString(`H=$(if [ -n "$HOME" ]; then cd -P -- "$HOME" 2>/dev/null && pwd -P; fi)` + "\n")
	b.WriteString(`if [ -z "$H" ]; then exit 127; fi` + "\n")
	fmt.Fprintf(&b, "D=\"${H%%/}/.cache/gorun/bin/%s\"\n", short)
	b.WriteString(`if [ ! -f "$D/gorun" ] || [ ! -x "$D/gorun" ]; then exit 127; fi` + "\n")
	names := []string{"gorun"}
	var checks strings.Builder
	for i, p := range extra {
		name, err := stageName(p, extra[:i])
		if err != nil {
			return "", err
		}
		st, err := os.Stat(p)
		if err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", p)
		}
		if err != nil {
			return "", err
		}
		esum, err := localHash(p)
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
		names = append(names, name)
		fmt.Fprintf(&checks, "v \"$D/%s\" %s || exit 127\n", name, shQuote(esum))
		if st.Mode().Perm()&0o111 != 0 {
			fmt.Fprintf(&checks, "if [ ! -x \"$D/%s\" ]; then exit 127; fi\n", name)
		}
	}
	fmt.Fprintf(&b, "if [ -n \"$(k %s)\" ]; then exit 127; fi\n", chainArgs("${H%/}", short, names...))
	fmt.Fprintf(&b, "v \"$D/gorun\" %s || exit 127\n", shQuote(sum))
	b.WriteString(checks.String())
	fmt.Fprintf(&b, "exec \"$D/gorun\"%s", quoteArgs(args))
	return shCommand(b.String()), nil
}

// startGlibc is StartCommand's check of the host's glibc for a binary
// linked against it (GlibcNeeds: its loader %s and the version %s, quoted):
// it exits 127 where the loader is missing or getconf tells a glibc older
// than the binary needs (o HAVE NEED, for versions of up to four decimal
// parts, as OlderGlibc; false where either is not a version).
const startGlibc = `if [ ! -e %s ]; then exit 127; fi
o() { oa=$1.0.0.0.0; ob=$2.0.0.0.0; for oi in 1 2 3 4; do ox=${oa%%%%.*}; oy=${ob%%%%.*}; oa=${oa#*.}; ob=${ob#*.}; case "$ox" in *[!0-9]*|"") return 1;; esac; case "$oy" in *[!0-9]*|"") return 1;; esac; if [ "$ox" -lt "$oy" ]; then return 0; fi; if [ "$ox" -gt "$oy" ]; then return 1; fi; done; return 1; }
gv=$(getconf GNU_LIBC_VERSION 2>/dev/null) || gv=
case "$gv" in "glibc "*) if o "${gv#glibc }" %s; then exit 127; fi;; esac
`

// quoteArgs returns args quoted for sh, each after a space.
func quoteArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(" " + shQuote(a))
	}
	return b.String()
}

// The probe prints "want HASH", "cache HASH", "home DIR" (the remote $HOME,
// its physical path) and "uname OS ARCH", then "extra I HASH X" for each
// extra file that is in the cache directory (probeExtra), X being "x" when
// it is executable there and "-" if not; first of all, checkFunc's lines
// for the cache from $HOME down (%s: chainArgs and the extra files' paths).
// The cache's files are hashed only where their stamps do not vouch for
// them (g, of stampFunc, whose sums are %s and the extra files' in
// probeExtra): where the check is silent, T is the random token %s, and g
// stamps a file that it hashed to the sum that Stage wants.
const probeScript = `p=%s
H=$(if [ -n "$HOME" ]; then cd -P -- "$HOME" 2>/dev/null && pwd -P; fi)
c="${H%%/}/.cache/gorun/bin/%s/gorun"
T=
if [ -n "$H" ]; then r=$(k %s); if [ -n "$r" ]; then printf '%%s\n' "$r"; else T=%s; fi; fi
if [ -f "$p" ] && [ -x "$p" ]; then echo "want $(h "$p")"; fi
if [ -f "$c" ] && [ -x "$c" ]; then echo "cache $(g "$c" %s)"; fi
echo "home $H"
echo "uname $(uname -s) $(uname -m)"
`

// hashFunc defines the sh function h, which prints the sha256 of the file
// $1, or nothing where neither sha256sum nor shasum is there.
const hashFunc = `h() { s=$(sha256sum < "$1" 2>/dev/null || shasum -a 256 < "$1" 2>/dev/null) && echo "${s%% *}"; }
`

// stampFunc defines the sh functions of the stamps that vouch for the
// files of the staging cache, so that a file that Stage copied (or hashed)
// once is not hashed again on every run. The stamp of DIR/NAME is
// DIR/.NAME.stamp, one line: the file's sha256 and its identity (q: inode,
// size, modification and change times, to the nanosecond, as stat prints
// them in UTC; nothing where stat has no -c, as on BSD, and then no stamp
// is written or trusted).
//
//   - q FILE prints FILE's identity.
//   - v FILE SUM is true when FILE's stamp says SUM and FILE's identity now.
//   - w FILE SUM ID TOKEN writes FILE's stamp (SUM and the identity ID,
//     taken before FILE was hashed or right after it was verified and put in
//     place) through a temporary file named with TOKEN, renamed into place,
//     mode 0600.
//   - g FILE SUM prints FILE's sha256: SUM where v vouches for it, else
//     hashed (h); a file hashed to SUM whose identity did not change while
//     it was hashed gets a new stamp, where T (the probe's token, set only
//     when checkFunc found the cache sound) is set.
//
// A stamp needs no hashing to be trusted because no process can change a
// file without the kernel setting its change time to the time of the
// change: a write, truncate, chmod, chown, rename or utimes all do, and no
// system call sets it back. Only root (by setting the clock, or writing the
// disk under the file system) can make a changed file look unchanged, and
// root can replace the file anyway; checkFunc, run on the same files
// before each use, makes sure that nobody else but the user can change
// them, nor the stamp's directory.
const stampFunc = `q() { TZ=UTC0 stat -c '%i %s %y %z' -- "$1" 2>/dev/null; }
v() { vf="${1%/*}/.${1##*/}.stamp"; [ -n "$2" ] && [ -f "$vf" ] && [ ! -L "$vf" ] && read -r vl < "$vf" && vi=$(q "$1") && [ -n "$vi" ] && [ "$vl" = "$2 $vi" ]; }
w() { wf="${1%/*}/.${1##*/}.stamp"; (umask 077; printf '%s %s\n' "$2" "$3" > "$wf.$4" && mv -f "$wf.$4" "$wf") 2>/dev/null || rm -f "$wf.$4"; }
g() { if v "$1" "$2"; then echo "$2"; return 0; fi; gi=$(q "$1"); gs=$(h "$1"); echo "$gs"; if [ -n "$T" ] && [ -n "$2" ] && [ -n "$gi" ] && [ "$gs" = "$2" ] && [ "$gi" = "$(q "$1")" ]; then w "$1" "$2" "$gi" "$T"; fi; }
`

// probeGlibc is the probe's part for a binary linked against glibc
// (GlibcNeeds): it prints "libc" and getconf's answer ("libc glibc 2.36";
// nothing where getconf does not know GNU_LIBC_VERSION, as on musl) and
// "noloader" when the binary's dynamic loader (%s, quoted) is not there.
const probeGlibc = `v=$(getconf GNU_LIBC_VERSION 2>/dev/null) && echo "libc $v"
if [ ! -e %s ]; then echo noloader; fi
`

// probeExtra is the probe's line for extra file I (its name is checked by
// stageName, so it needs no quoting; its sha256 here is the last %s).
const probeExtra = `e="${H%%/}/.cache/gorun/bin/%s/%s"; if [ -f "$e" ]; then x=-; if [ -x "$e" ]; then x=x; fi; echo "extra %d $(g "$e" %s) $x"; fi
`

// The copier makes the cache directory where it is missing (mode 0700, as
// are the directories above it that it makes), checks it again from $HOME
// down (checkFunc, which must come first; the probe checked what was there,
// not what the copier made) and exits 4 after checkFunc's lines on its
// standard error if it is unsafe; then it reads a file on stdin into a
// temporary file next to its final place (the cache directory, NAME),
// checks it, sets its mode and renames it into place, so that concurrent
// stagers on a shared file system never see a partial file. Its arguments:
// the directory's name (the short hash), checkFunc's arguments
// (chainArgs), NAME, a random token, the sha256, the size, the mode and
// NAME again. Where it verified the copy's sha256, it then stamps the file
// in place (stampFunc's w; NAME twice more, the sha256 and the token), so
// that later probes and StartCommand need not hash it again.
const copyScript = `set -e
umask 077
: "${HOME:?HOME is not set}"
H=$(cd -P -- "$HOME" && pwd -P)
d="${H%%/}/.cache/gorun/bin/%s"
mkdir -p "$d"
r=$(k %s) || :
if [ -n "$r" ]; then printf '%%s\n' "$r" >&2; exit 4; fi
t="$d/.%s.tmp.%s"
trap 'rm -f "$t"' EXIT
cat > "$t"
s=$(sha256sum < "$t" 2>/dev/null || shasum -a 256 < "$t" 2>/dev/null || true)
s="${s%%%% *}"
if [ -n "$s" ] && [ "$s" != %s ]; then echo "checksum mismatch after copy: $s" >&2; exit 3; fi
n=$(wc -c < "$t" | tr -d ' ')
if [ "$n" != %d ]; then echo "size mismatch after copy: $n bytes" >&2; exit 3; fi
chmod %s "$t"
mv -f "$t" "$d/%s"
trap - EXIT
if [ -n "$s" ]; then i=$(q "$d/%s") || i=; if [ -n "$i" ]; then w "$d/%s" %s "$i" %s; fi; fi
`

// runSession runs cmd in a new session of c with stdin, returning stdout; it
// gives up when ctx is done.
func runSession(ctx context.Context, c *ssh.Client, cmd string, stdin io.Reader) (string, error) {
	s, err := c.NewSession()
	if err != nil {
		return "", fmt.Errorf("open session: %w", err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdin, s.Stdout, s.Stderr = stdin, &out, &errb
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	err = s.Run(cmd)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		if msg := strings.TrimSpace(errb.String()); msg != "" {
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	return out.String(), nil
}

// goArch maps uname -s and -m to GOOS and GOARCH, or "" where unsure.
func goPlatform(osName, machine string) (string, string) {
	goos := strings.ToLower(osName)
	switch goos {
	case "linux", "darwin", "freebsd", "openbsd", "netbsd":
	default:
		goos = ""
	}
	var goarch string
	switch machine {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64":
		goarch = "arm64"
	case "ppc64le":
		goarch = "ppc64le"
	case "s390x":
		goarch = "s390x"
	case "riscv64":
		goarch = "riscv64"
	case "i386", "i686":
		goarch = "386"
	}
	return goos, goarch
}

// Stage makes sure the remote host of c can run the gorun binary localExe
// (the head's own executable). If localExe is linked against glibc (a cgo
// build) and the host's glibc, as `getconf GNU_LIBC_VERSION` tells it, is
// older than localExe needs, or the host lacks its dynamic loader, Stage
// copies nothing and returns a *HostError wrapping a *GlibcError: the
// caller may stage a static build instead. (Where getconf does not tell,
// Stage goes on.) If wantPath exists there, is executable and
// has localExe's sha256, Stage returns Staged{Path: wantPath}. Otherwise it
// copies localExe over c into ~/.cache/gorun/bin/<first 16 hex of its
// sha256>/gorun (the remote $HOME; the copy is skipped when that file
// already has the right hash) and returns its absolute path as Path, with
// Cached set: $HOME there as its physical path (no symbolic link), for
// StagedCommand, which is how that copy must be run. Copied says whether
// anything was copied this time. The remote host needs a POSIX sh, find, and sha256sum
// (or shasum) for the comparisons. Errors are *HostError naming the host.
//
// Before it copies anything, Stage checks the cache as sshd's StrictModes
// checks authorized_keys: $HOME and each component below it that exists,
// down to the files it would copy, must be owned by the remote user or
// root, not a symbolic link, and writable by neither group nor others.
// Otherwise the HostError wraps an *UnsafeCacheError naming the first
// such path and why, and nothing is copied. The directories that Stage
// makes are mode 0700. (A cache of another user's, or one that others can
// write, would let them replace the gorun that the user's agents run.)
//
// When it stages gorun (and only then), Stage also puts each of the local
// files extra (such as the gorun-pmix plugin next to the head's gorun) into
// that directory under its base name, next to the staged gorun, checked and
// skipped by sha256 as gorun is, executable there when it is here. Their
// base names must be plain file names other than "gorun". An extra file
// that cannot be read is an error naming it, found before anything is
// copied.
func Stage(ctx context.Context, c *ssh.Client, localExe string, wantPath string, extra ...string) (Staged, error) {
	host := hostOf(c)
	fail := func(format string, args ...any) (Staged, error) {
		return Staged{}, hostErr(host, Other, fmt.Errorf("staging gorun: "+format, args...), "")
	}
	st, err := newStaging(localExe, extra)
	if err != nil {
		return fail("%v", err)
	}
	probe, err := st.probe(wantPath)
	if err != nil {
		return fail("%v", err)
	}
	out, err := runSession(ctx, c, shCommand(probe), nil)
	if err != nil {
		return fail("checking %s: %v", wantPath, err)
	}
	found := st.parseProbe(out)
	if st.needGlibc != "" && !found.otherPlatform() && (found.noLoader || OlderGlibc(found.glibc, st.needGlibc)) {
		ge := &GlibcError{Need: st.needGlibc, Have: found.glibc}
		if found.noLoader {
			ge.Loader = st.loader
		}
		return Staged{}, hostErr(host, Other, fmt.Errorf("staging gorun: %w", ge), "")
	}
	if found.wantSum == st.sum {
		return Staged{Path: wantPath}, nil
	}
	if found.home == "" || !strings.HasPrefix(found.home, "/") {
		return fail("the remote HOME is %q, not an absolute path", found.home)
	}
	if found.unsafe != nil {
		return Staged{}, hostErr(host, Other, fmt.Errorf("staging gorun: %w", found.unsafe), UnsafeHint)
	}
	// The extra files are read here, before anything is copied.
	if err := st.readExtras(); err != nil {
		return fail("%v", err)
	}
	if found.cacheSum != st.sum && found.otherPlatform() {
		return Staged{}, hostErr(host, Other,
			fmt.Errorf("staging gorun: the host is %s/%s but this gorun is built for %s/%s", found.goos, found.goarch, runtime.GOOS, runtime.GOARCH),
			fmt.Sprintf("install a gorun for %s/%s at %s on it", found.goos, found.goarch, wantPath))
	}
	done, err := st.copy(ctx, c, strings.TrimSuffix(found.home, "/")+"/.cache/gorun/bin/"+st.short, found.cacheSum != st.sum)
	if err != nil {
		return Staged{}, copyErr(host, err)
	}
	return done, nil
}

// Staged is what Stage found or did on a host.
type Staged struct {
	// Path is the gorun to run there: wantPath, or the copy in the
	// staging cache.
	Path string
	// Cached means that Path is the copy in the cache, which must be run
	// with StagedCommand.
	Cached bool
	// Copied means that Stage copied gorun, or one of the extra files,
	// into the cache this time; false when the cache already held them
	// all (or Path is wantPath).
	Copied bool
}

// copyErr is the HostError of a copy into the cache of host that failed.
func copyErr(host string, err error) *HostError {
	var u *UnsafeCacheError
	if errors.As(err, &u) {
		return hostErr(host, Other, fmt.Errorf("staging gorun: %w", err), UnsafeHint)
	}
	return hostErr(host, Other, fmt.Errorf("staging gorun: %w", err), "")
}

// stagedFile is a file that Stage copies into the cache directory.
type stagedFile struct {
	local      string // its path here
	name       string // its name there
	sum        string // its sha256 here
	exec       bool   // executable here, and so there
	remoteSum  string // the sha256 of the file of that name there, if any
	remoteExec bool   // whether that file is executable
}

// stageName returns the name that the extra file p gets in the cache
// directory: its base name, which must be a plain file name (letters,
// digits, '.', '_', '+' and '-', not starting with '.'), not "gorun" and
// not the name of an earlier file of before.
func stageName(p string, before []string) (string, error) {
	name := filepath.Base(p)
	if name == "gorun" {
		return "", fmt.Errorf("cannot copy %s next to gorun: it has gorun's own name", p)
	}
	if p == "" || strings.HasPrefix(name, ".") || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r))
	}) >= 0 {
		return "", fmt.Errorf("cannot copy %q: its name is not a plain file name (letters, digits, '.', '_', '+' and '-', not starting with '.')", p)
	}
	for _, b := range before {
		if filepath.Base(b) == name {
			return "", fmt.Errorf("cannot copy both %s and %s: both are named %s", b, p, name)
		}
	}
	return name, nil
}

// copyTo copies f over c into the cache directory short (remotePath is its
// path there, for errors). Errors name the local file and remotePath.
func copyTo(ctx context.Context, c *ssh.Client, f stagedFile, short, remotePath string) error {
	fail := func(err error) error {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("copying %s to %s: %w", f.local, remotePath, err)
		}
		return fmt.Errorf("copying %s to %s: %v", f.local, remotePath, err)
	}
	r, err := os.Open(f.local)
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return fail(err)
	}
	tok, err := token()
	if err != nil {
		return fail(err)
	}
	mode := "644"
	if f.exec {
		mode = "755"
	}
	script := checkFunc + stampFunc + fmt.Sprintf(copyScript, short, chainArgs("${H%/}", short), f.name, tok, shQuote(f.sum), st.Size(), mode, f.name,
		f.name, f.name, shQuote(f.sum), tok)
	if _, err := runSession(ctx, c, shCommand(script), r); err != nil {
		// The script's refusal is its standard error, in err's text.
		if i := strings.Index(err.Error(), unsafePrefix); i >= 0 {
			line, _, _ := strings.Cut(err.Error()[i:], "\n")
			if u, ok := ParseUnsafe(line); ok {
				return fmt.Errorf("copying %s to %s: %w", f.local, remotePath, u)
			}
		}
		return fail(err)
	}
	return nil
}

// token returns a random token for the names of temporary files, which
// hosts that share a home must not share: 16 hex digits.
func token() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
