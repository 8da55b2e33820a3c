// This file holds ranks' output written to files on their hosts, as
// torchrun writes them (--log-dir, --redirects, --tee,
// --local-ranks-filter) and as Hydra does (-outfile-pattern,
// -errfile-pattern): the head says which files, the agent writes them.

package launcher

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
)

// The streams, as RankFiles' masks count them.
const (
	streamOut  = uint8(output.Stdout) // 1
	streamErr  = uint8(output.Stderr) // 2
	streamBoth = streamOut | streamErr
)

// RankFiles sends ranks' output to files on their hosts.
type RankFiles struct {
	// Stdout and Stderr are the files' path templates ("" = no file for
	// that stream), in which {rank}, {local_rank}, {node} (the node
	// rank), {host} and {attempt} (the restart count) stand for the
	// rank's.
	Stdout, Stderr string
	// Files and Console say, for each local rank, which streams (1
	// stdout, 2 stderr) go to the files and which to gorun's output as
	// well; a local rank that Files lacks takes Files[-1], and so does
	// Console (absent too: every stream with a template goes to its
	// file, and none of them to gorun's output).
	Files, Console map[int]uint8
	// Dir is the directory torchrun's layout puts every file in, for
	// the note that names it; "" for patterns.
	Dir string
}

// streams returns the streams of local rank lr that go to files and the
// ones that do not go to gorun's output.
func (f *RankFiles) streams(lr int) (files, quiet uint8) {
	files, ok := f.Files[lr]
	if !ok {
		if files, ok = f.Files[-1]; !ok {
			files = 0
			if f.Stdout != "" {
				files |= streamOut
			}
			if f.Stderr != "" {
				files |= streamErr
			}
		}
	}
	console, ok := f.Console[lr]
	if !ok {
		if console, ok = f.Console[-1]; !ok {
			console = streamBoth &^ files
		}
	}
	return files, streamBoth &^ console
}

// forRank returns what rank r (local rank lr on node, host) writes in
// generation gen; nil when nothing.
func (f *RankFiles) forRank(r, lr, node int, host string, gen int) *control.RankFiles {
	if f == nil {
		return nil
	}
	files, quiet := f.streams(lr)
	if files == 0 && quiet == 0 {
		return nil
	}
	expand := func(t string) string {
		return strings.NewReplacer("{rank}", strconv.Itoa(r), "{local_rank}", strconv.Itoa(lr), "{node}", strconv.Itoa(node),
			"{host}", host, "{attempt}", strconv.Itoa(gen)).Replace(t)
	}
	rf := &control.RankFiles{Quiet: quiet}
	if files&streamOut != 0 && f.Stdout != "" {
		rf.Stdout = expand(f.Stdout)
	}
	if files&streamErr != 0 && f.Stderr != "" {
		rf.Stderr = expand(f.Stderr)
	}
	return rf
}

// ParseStd parses torchrun's --redirects and --tee: 0 (none), 1 (stdout),
// 2 (stderr), 3 (both), or per local rank, LOCAL:N,LOCAL:N. The map's
// key -1 is every local rank.
func ParseStd(flag, s string) (map[int]uint8, error) {
	bad := fmt.Errorf("%w: %s %q: want 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank: 0:1,1:2", ErrUsage, flag, s)
	one := func(v string) (uint8, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3 {
			return 0, bad
		}
		return uint8(n), nil
	}
	if !strings.Contains(s, ":") {
		n, err := one(s)
		return map[int]uint8{-1: n}, err
	}
	out := map[int]uint8{-1: 0}
	for _, part := range strings.Split(s, ",") {
		lr, v, _ := strings.Cut(part, ":")
		k, err := strconv.Atoi(lr)
		if err != nil || k < 0 {
			return nil, bad
		}
		if out[k], err = one(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TorchLogs returns torchrun's files (--log-dir DIR, --redirects,
// --tee, --local-ranks-filter): each local rank's redirected or tee'd
// streams go to DIR/RUN_XXXXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log
// (RUN: the run id, "none" unless --rdzv-id; XXXXXXXX: random), on its
// node; redirected ones go there only. Without DIR, redirected streams go
// under a directory of the temporary directory (torchelastic_XXXXXXXX),
// as torchrun's. filter, if set, lists the local ranks whose output gorun
// prints at all (files are written all the same). nil when nothing of
// the kind was asked.
func TorchLogs(dir, runID, redirects, tee, filter string) (*RankFiles, error) {
	if dir == "" && redirects == "" && tee == "" && filter == "" {
		return nil, nil
	}
	red, err := ParseStd("--redirects", cmpOr(redirects, "0"))
	if err != nil {
		return nil, err
	}
	t, err := ParseStd("--tee", cmpOr(tee, "0"))
	if err != nil {
		return nil, err
	}
	f := &RankFiles{Files: map[int]uint8{}, Console: map[int]uint8{}}
	for k := range merged(red, t) {
		r, tt := lookupStd(red, k), lookupStd(t, k)
		f.Files[k] = r | tt
		f.Console[k] = (streamBoth &^ r) | tt
	}
	if filter != "" {
		show := map[int]bool{}
		for _, v := range strings.Split(filter, ",") {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 {
				return nil, fmt.Errorf("%w: --local-ranks-filter %q: want local ranks, such as 0,1,2", ErrUsage, filter)
			}
			show[k] = true
			if _, ok := f.Console[k]; !ok {
				f.Console[k], f.Files[k] = f.Console[-1], f.Files[-1]
			}
		}
		for k := range f.Console {
			if !show[k] {
				f.Console[k] = 0
			}
		}
	}
	anyFiles := false
	for _, v := range f.Files {
		anyFiles = anyFiles || v != 0
	}
	if !anyFiles {
		return f, nil // the filter alone
	}
	if dir == "" {
		dir = os.TempDir()
		runID = "torchelastic"
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	f.Dir = filepath.Join(dir, cmpOr(runID, "none")+"_"+randomSuffix())
	f.Stdout = filepath.Join(f.Dir, "attempt_{attempt}", "{local_rank}", "stdout.log")
	f.Stderr = filepath.Join(f.Dir, "attempt_{attempt}", "{local_rank}", "stderr.log")
	return f, nil
}

// HydraFiles returns Hydra's files (-outfile-pattern, -errfile-pattern):
// each rank's stdout, or stderr, to the file its pattern names, instead
// of gorun's output. In a pattern %r is the rank, %h the host, %p the
// node (Hydra's proxy), %g 0 (Hydra's process group) and %% a '%'. nil
// when neither is given.
func HydraFiles(outPattern, errPattern string) (*RankFiles, error) {
	if outPattern == "" && errPattern == "" {
		return nil, nil
	}
	f := &RankFiles{}
	for _, p := range []struct {
		flag, pattern string
		dst           *string
	}{{"--outfile-pattern", outPattern, &f.Stdout}, {"--errfile-pattern", errPattern, &f.Stderr}} {
		if p.pattern == "" {
			continue
		}
		var b strings.Builder
		for i := 0; i < len(p.pattern); i++ {
			c := p.pattern[i]
			if c != '%' {
				b.WriteByte(c)
				continue
			}
			if i+1 == len(p.pattern) {
				return nil, fmt.Errorf("%w: %s %q: a '%%' ends it (%%r rank, %%h host, %%p node, %%g process group, %%%% '%%')", ErrUsage, p.flag, p.pattern)
			}
			i++
			switch p.pattern[i] {
			case 'r':
				b.WriteString("{rank}")
			case 'h':
				b.WriteString("{host}")
			case 'p':
				b.WriteString("{node}")
			case 'g':
				b.WriteString("0")
			case '%':
				b.WriteByte('%')
			default:
				return nil, fmt.Errorf("%w: %s %q: %%%c: want %%r (rank), %%h (host), %%p (node), %%g (process group) or %%%%", ErrUsage, p.flag, p.pattern, p.pattern[i])
			}
		}
		*p.dst = b.String()
	}
	return f, nil
}

// merged returns the keys of a and b.
func merged(a, b map[int]uint8) map[int]bool {
	out := map[int]bool{-1: true}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// lookupStd is m's value for local rank k, else for every rank (-1).
func lookupStd(m map[int]uint8, k int) uint8 {
	if v, ok := m[k]; ok {
		return v
	}
	return m[-1]
}

// cmpOr is s, or def when s is "".
func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// randomSuffix is 8 random letters and digits, as mkdtemp's.
func randomSuffix() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789_"
	var b [8]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b[:])
}

// rankOutput is a rank's files, as its agent writes them.
type rankOutput struct {
	files [3]*os.File // by stream (output.Stdout, output.Stderr)
	quiet uint8
}

// openRankFiles creates rank's files (and their directories), a relative
// name taken from dir, the rank's working directory; nil when it writes
// none. A file that cannot be made is an error: the rank does not start.
func openRankFiles(f *control.RankFiles, dir string) (*rankOutput, error) {
	if f == nil {
		return nil, nil
	}
	o := &rankOutput{quiet: f.Quiet}
	for s, path := range map[output.Stream]string{output.Stdout: f.Stdout, output.Stderr: f.Stderr} {
		if path == "" {
			continue
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			o.close()
			return nil, fmt.Errorf("the rank's %s file: %w", s, err)
		}
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			o.close()
			return nil, fmt.Errorf("the rank's %s file: %w", s, err)
		}
		o.files[s] = fh
	}
	return o, nil
}

// write writes data of stream s to its file, if it has one, and reports
// whether it also goes to gorun's output.
func (o *rankOutput) write(s output.Stream, data []byte) (relay bool) {
	if o == nil {
		return true
	}
	if f := o.files[s]; f != nil {
		f.Write(data) // a full disk loses the file's copy, not the rank
	}
	return o.quiet&uint8(s) == 0
}

// closeStream closes stream s's file, once the rank's pipe has ended.
func (o *rankOutput) closeStream(s output.Stream) {
	if o != nil && o.files[s] != nil {
		o.files[s].Close()
	}
}

// close closes every file.
func (o *rankOutput) close() {
	if o == nil {
		return
	}
	for _, f := range o.files {
		if f != nil {
			f.Close()
		}
	}
}
