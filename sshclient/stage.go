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
	"runtime"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// exeHash caches the sha256 of local executables, keyed by path, size and
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

// The probe prints "want HASH", "cache HASH", "home DIR" and "uname OS ARCH".
const probeScript = `h() { s=$(sha256sum < "$1" 2>/dev/null || shasum -a 256 < "$1" 2>/dev/null) && echo "${s%%%% *}"; }
p=%s
c="$HOME/.cache/gorun/bin/%s/gorun"
if [ -f "$p" ] && [ -x "$p" ]; then echo "want $(h "$p")"; fi
if [ -f "$c" ] && [ -x "$c" ]; then echo "cache $(h "$c")"; fi
echo "home $HOME"
echo "uname $(uname -s) $(uname -m)"
`

// The copier reads the binary on stdin into a temporary file next to its
// final place, checks it, makes it executable and renames it into place, so
// that concurrent stagers on a shared file system never see a partial file.
const copyScript = `set -e
: "${HOME:?HOME is not set}"
d="$HOME/.cache/gorun/bin/%s"
mkdir -p "$d"
t="$d/.gorun.tmp.%s"
trap 'rm -f "$t"' EXIT
cat > "$t"
s=$(sha256sum < "$t" 2>/dev/null || shasum -a 256 < "$t" 2>/dev/null || true)
s="${s%%%% *}"
if [ -n "$s" ] && [ "$s" != %s ]; then echo "checksum mismatch after copy: $s" >&2; exit 3; fi
n=$(wc -c < "$t" | tr -d ' ')
if [ "$n" != %d ]; then echo "size mismatch after copy: $n bytes" >&2; exit 3; fi
chmod 755 "$t"
mv -f "$t" "$d/gorun"
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
// (the head's own executable). If wantPath exists there, is executable and
// has localExe's sha256, Stage returns wantPath, false. Otherwise it copies
// localExe over c into ~/.cache/gorun/bin/<first 16 hex of its sha256>/gorun
// (the remote $HOME; the copy is skipped when that file already has the
// right hash) and returns its absolute path, true. The remote host needs a
// POSIX sh, and sha256sum (or shasum) for the comparisons. Errors are
// *HostError naming the host.
func Stage(ctx context.Context, c *ssh.Client, localExe string, wantPath string) (remotePath string, staged bool, err error) {
	host := hostOf(c)
	fail := func(format string, args ...any) (string, bool, error) {
		return "", false, hostErr(host, Other, fmt.Errorf("staging gorun: "+format, args...), "")
	}
	sum, err := localHash(localExe)
	if err != nil {
		return fail("%v", err)
	}
	short := sum[:16]
	out, err := runSession(ctx, c, shCommand(fmt.Sprintf(probeScript, shQuote(wantPath), short)), nil)
	if err != nil {
		return fail("checking %s: %v", wantPath, err)
	}
	var wantSum, cacheSum, home, unameOS, unameArch string
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
		}
	}
	if wantSum == sum {
		return wantPath, false, nil
	}
	if home == "" || !strings.HasPrefix(home, "/") {
		return fail("the remote HOME is %q, not an absolute path", home)
	}
	cachePath := strings.TrimSuffix(home, "/") + "/.cache/gorun/bin/" + short + "/gorun"
	if cacheSum == sum {
		return cachePath, true, nil
	}
	if goos, goarch := goPlatform(unameOS, unameArch); goos != "" && goarch != "" &&
		(goos != runtime.GOOS || goarch != runtime.GOARCH) {
		return "", false, hostErr(host, Other,
			fmt.Errorf("staging gorun: the host is %s/%s but this gorun is built for %s/%s", goos, goarch, runtime.GOOS, runtime.GOARCH),
			fmt.Sprintf("install a gorun for %s/%s at %s on it", goos, goarch, wantPath))
	}

	f, err := os.Open(localExe)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail("%v", err)
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return fail("%v", err)
	}
	script := fmt.Sprintf(copyScript, short, hex.EncodeToString(tok[:]), shQuote(sum), st.Size())
	if _, err := runSession(ctx, c, shCommand(script), f); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "", false, hostErr(host, Other, fmt.Errorf("staging gorun: %w", err), "")
		}
		return fail("copying %s to %s: %v", localExe, cachePath, err)
	}
	return cachePath, true, nil
}
