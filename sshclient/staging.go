package sshclient

// Stage's steps: what it knows here of the files it stages, the probe of
// the host, what the probe found, and the copies.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// staging is what Stage knows here of the files it stages.
type staging struct {
	exe       string       // the gorun to stage
	sum       string       // its sha256
	short     string       // the first 16 hex digits of sum: the cache directory's name
	needGlibc string       // the glibc it needs, if it is linked against glibc (GlibcNeeds)
	loader    string       // and its dynamic loader
	extras    []stagedFile // the extra files, in order
}

// newStaging hashes the gorun localExe, reads which glibc it needs, and
// names the extra files in the cache.
func newStaging(localExe string, extra []string) (*staging, error) {
	sum, err := localHash(localExe)
	if err != nil {
		return nil, err
	}
	st := &staging{exe: localExe, sum: sum, short: sum[:16], extras: make([]stagedFile, len(extra))}
	if st.needGlibc, st.loader, err = GlibcNeeds(localExe); err != nil {
		return nil, err
	}
	for i, p := range extra {
		name, err := stageName(p, extra[:i])
		if err != nil {
			return nil, err
		}
		st.extras[i] = stagedFile{local: p, name: name}
	}
	return st, nil
}

// probe returns the script that finds, in one round trip, what the host
// has (probeScript; probeGlibc for a gorun linked against glibc;
// probeExtra for each extra file).
func (st *staging) probe(wantPath string) (string, error) {
	tok, err := token()
	if err != nil {
		return "", err
	}
	names := []string{"gorun"}
	for _, e := range st.extras {
		names = append(names, e.name)
	}
	probe := hashFunc + stampFunc + checkFunc +
		fmt.Sprintf(probeScript, shQuote(wantPath), st.short, chainArgs("${H%/}", st.short, names...), tok, shQuote(st.sum))
	if st.needGlibc != "" && st.loader != "" {
		probe += fmt.Sprintf(probeGlibc, shQuote(st.loader))
	}
	for i, e := range st.extras {
		// The stamp of a file that cannot be hashed here vouches for
		// nothing: it is hashed there, and the error is found later.
		want, _ := localHash(e.local)
		probe += fmt.Sprintf(probeExtra, st.short, e.name, i, shQuote(want))
	}
	return probe, nil
}

// probed is what the probe found on the host.
type probed struct {
	wantSum  string // the sha256 of the gorun at wantPath, if any
	cacheSum string // of the copy in the cache, if any
	home     string // $HOME's physical path
	goos     string // the host's platform as Go names it, or "" where unsure
	goarch   string
	glibc    string // the host's glibc version, where getconf told it
	noLoader bool   // the host lacks the gorun's dynamic loader
	unsafe   *UnsafeCacheError
}

// otherPlatform reports whether the host is surely not of this gorun's
// platform.
func (p probed) otherPlatform() bool {
	return p.goos != "" && p.goarch != "" && (p.goos != runtime.GOOS || p.goarch != runtime.GOARCH)
}

// parseProbe reads the probe's output; what it says of the extra files
// goes into st.extras.
func (st *staging) parseProbe(out string) probed {
	var p probed
	var unameOS, unameArch string
	for _, line := range strings.Split(out, "\n") {
		if u, ok := ParseUnsafe(line); ok {
			if p.unsafe == nil {
				p.unsafe = u
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "want":
			if len(f) > 1 {
				p.wantSum = f[1]
			}
		case "cache":
			if len(f) > 1 {
				p.cacheSum = f[1]
			}
		case "home":
			p.home = strings.TrimPrefix(line, "home ")
		case "uname":
			if len(f) > 2 {
				unameOS, unameArch = f[1], f[2]
			}
		case "libc":
			p.glibc = glibcVersion(strings.TrimPrefix(line, "libc "))
		case "noloader":
			p.noLoader = true
		case "extra":
			if len(f) > 3 {
				if i, err := strconv.Atoi(f[1]); err == nil && i >= 0 && i < len(st.extras) {
					st.extras[i].remoteSum, st.extras[i].remoteExec = f[2], f[3] == "x"
				}
			}
		}
	}
	p.goos, p.goarch = goPlatform(unameOS, unameArch)
	return p
}

// readExtras hashes the extra files and notes which are executable; a
// file that is not a regular one, or cannot be read, is an error.
func (st *staging) readExtras() error {
	for i := range st.extras {
		e := &st.extras[i]
		fi, err := os.Stat(e.local)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", e.local)
		}
		if err != nil {
			return err
		}
		if e.sum, err = localHash(e.local); err != nil {
			return err
		}
		e.exec = fi.Mode().Perm()&0o111 != 0
	}
	return nil
}

// copy copies into the cache directory dir of the host of c gorun (where
// withGorun) and the extra files that it lacks, or has with another
// sha256 or not executable where they should be.
func (st *staging) copy(ctx context.Context, c *ssh.Client, dir string, withGorun bool) (Staged, error) {
	done := Staged{Path: dir + "/gorun", Cached: true}
	if withGorun {
		if err := copyTo(ctx, c, stagedFile{local: st.exe, name: "gorun", sum: st.sum, exec: true}, st.short, done.Path); err != nil {
			return Staged{}, err
		}
		done.Copied = true
	}
	for _, e := range st.extras {
		if e.remoteSum == e.sum && (e.remoteExec || !e.exec) {
			continue
		}
		if err := copyTo(ctx, c, e, st.short, dir+"/"+e.name); err != nil {
			return Staged{}, err
		}
		done.Copied = true
	}
	return done, nil
}
