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
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// exeHashes caches the sha256 of local files, keyed by path, size and
// modification time.
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
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	v, _ := exeHashes.LoadOrStore(key, &hashEntry{})
	e := v.(*hashEntry)
	e.once.Do(func() {
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
	})
	if e.err != nil {
		exeHashes.CompareAndDelete(key, e) // not kept: the next call tries again
	}
	return e.sum, e.err
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

// The probe prints "want HASH", "cache HASH", "home DIR" and "uname OS ARCH",
// then "extra I HASH X" for each extra file that is in the cache directory
// (probeExtra), X being "x" when it is executable there and "-" if not.
const probeScript = `h() { s=$(sha256sum < "$1" 2>/dev/null || shasum -a 256 < "$1" 2>/dev/null) && echo "${s%%%% *}"; }
p=%s
c="$HOME/.cache/gorun/bin/%s/gorun"
if [ -f "$p" ] && [ -x "$p" ]; then echo "want $(h "$p")"; fi
if [ -f "$c" ] && [ -x "$c" ]; then echo "cache $(h "$c")"; fi
echo "home $HOME"
echo "uname $(uname -s) $(uname -m)"
`

// probeGlibc is the probe's part for a binary linked against glibc
// (GlibcNeeds): it prints "libc" and getconf's answer ("libc glibc 2.36";
// nothing where getconf does not know GNU_LIBC_VERSION, as on musl) and
// "noloader" when the binary's dynamic loader (%s, quoted) is not there.
const probeGlibc = `v=$(getconf GNU_LIBC_VERSION 2>/dev/null) && echo "libc $v"
if [ ! -e %s ]; then echo noloader; fi
`

// probeExtra is the probe's line for extra file I (its name is checked by
// stageName, so it needs no quoting).
const probeExtra = `e="$HOME/.cache/gorun/bin/%s/%s"; if [ -f "$e" ]; then x=-; if [ -x "$e" ]; then x=x; fi; echo "extra %d $(h "$e") $x"; fi
`

// The copier reads a file on stdin into a temporary file next to its final
// place (the cache directory, NAME), checks it, sets its mode and renames it
// into place, so that concurrent stagers on a shared file system never see
// a partial file. Its arguments: the directory, NAME, a random token, the
// sha256, the size, the mode and NAME again.
const copyScript = `set -e
: "${HOME:?HOME is not set}"
d="$HOME/.cache/gorun/bin/%s"
mkdir -p "$d"
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
// has localExe's sha256, Stage returns wantPath, false. Otherwise it copies
// localExe over c into ~/.cache/gorun/bin/<first 16 hex of its sha256>/gorun
// (the remote $HOME; the copy is skipped when that file already has the
// right hash) and returns its absolute path, true. The remote host needs a
// POSIX sh, and sha256sum (or shasum) for the comparisons. Errors are
// *HostError naming the host.
//
// When it stages gorun (and only then), Stage also puts each of the local
// files extra (such as the gorun-pmix plugin next to the head's gorun) into
// that directory under its base name, next to the staged gorun, checked and
// skipped by sha256 as gorun is, executable there when it is here. Their
// base names must be plain file names other than "gorun". An extra file
// that cannot be read is an error naming it, found before anything is
// copied.
func Stage(ctx context.Context, c *ssh.Client, localExe string, wantPath string, extra ...string) (remotePath string, staged bool, err error) {
	host := hostOf(c)
	fail := func(format string, args ...any) (string, bool, error) {
		return "", false, hostErr(host, Other, fmt.Errorf("staging gorun: "+format, args...), "")
	}
	sum, err := localHash(localExe)
	if err != nil {
		return fail("%v", err)
	}
	short := sum[:16]
	extras := make([]stagedFile, len(extra))
	needGlibc, loader, err := GlibcNeeds(localExe)
	if err != nil {
		return fail("%v", err)
	}
	probe := fmt.Sprintf(probeScript, shQuote(wantPath), short)
	if needGlibc != "" && loader != "" {
		probe += fmt.Sprintf(probeGlibc, shQuote(loader))
	}
	for i, p := range extra {
		name, err := stageName(p, extra[:i])
		if err != nil {
			return fail("%v", err)
		}
		extras[i] = stagedFile{local: p, name: name}
		probe += fmt.Sprintf(probeExtra, short, name, i)
	}
	out, err := runSession(ctx, c, shCommand(probe), nil)
	if err != nil {
		return fail("checking %s: %v", wantPath, err)
	}
	var wantSum, cacheSum, home, unameOS, unameArch, haveGlibc string
	noLoader := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "want":
			if len(f) > 1 {
				wantSum = f[1]
			}
		case "cache":
			if len(f) > 1 {
				cacheSum = f[1]
			}
		case "home":
			home = strings.TrimPrefix(line, "home ")
		case "uname":
			if len(f) > 2 {
				unameOS, unameArch = f[1], f[2]
			}
		case "libc":
			haveGlibc = glibcVersion(strings.TrimPrefix(line, "libc "))
		case "noloader":
			noLoader = true
		case "extra":
			if len(f) > 3 {
				if i, err := strconv.Atoi(f[1]); err == nil && i >= 0 && i < len(extras) {
					extras[i].remoteSum, extras[i].remoteExec = f[2], f[3] == "x"
				}
			}
		}
	}
	goos, goarch := goPlatform(unameOS, unameArch)
	otherPlatform := goos != "" && goarch != "" && (goos != runtime.GOOS || goarch != runtime.GOARCH)
	if needGlibc != "" && !otherPlatform && (noLoader || OlderGlibc(haveGlibc, needGlibc)) {
		ge := &GlibcError{Need: needGlibc, Have: haveGlibc}
		if noLoader {
			ge.Loader = loader
		}
		return "", false, hostErr(host, Other, fmt.Errorf("staging gorun: %w", ge), "")
	}
	if wantSum == sum {
		return wantPath, false, nil
	}
	if home == "" || !strings.HasPrefix(home, "/") {
		return fail("the remote HOME is %q, not an absolute path", home)
	}
	dir := strings.TrimSuffix(home, "/") + "/.cache/gorun/bin/" + short
	cachePath := dir + "/gorun"
	// The extra files are read here, before anything is copied.
	for i := range extras {
		e := &extras[i]
		st, err := os.Stat(e.local)
		if err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", e.local)
		}
		if err != nil {
			return fail("%v", err)
		}
		if e.sum, err = localHash(e.local); err != nil {
			return fail("%v", err)
		}
		e.exec = st.Mode().Perm()&0o111 != 0
	}
	if cacheSum != sum {
		if otherPlatform {
			return "", false, hostErr(host, Other,
				fmt.Errorf("staging gorun: the host is %s/%s but this gorun is built for %s/%s", goos, goarch, runtime.GOOS, runtime.GOARCH),
				fmt.Sprintf("install a gorun for %s/%s at %s on it", goos, goarch, wantPath))
		}
		if err := copyTo(ctx, c, stagedFile{local: localExe, name: "gorun", sum: sum, exec: true}, short, cachePath); err != nil {
			return "", false, hostErr(host, Other, fmt.Errorf("staging gorun: %w", err), "")
		}
	}
	for _, e := range extras {
		if e.remoteSum == e.sum && (e.remoteExec || !e.exec) {
			continue
		}
		if err := copyTo(ctx, c, e, short, dir+"/"+e.name); err != nil {
			return "", false, hostErr(host, Other, fmt.Errorf("staging gorun: %w", err), "")
		}
	}
	return cachePath, true, nil
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
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return fail(err)
	}
	mode := "644"
	if f.exec {
		mode = "755"
	}
	script := fmt.Sprintf(copyScript, short, f.name, hex.EncodeToString(tok[:]), shQuote(f.sum), st.Size(), mode, f.name)
	if _, err := runSession(ctx, c, shCommand(script), r); err != nil {
		return fail(err)
	}
	return nil
}
