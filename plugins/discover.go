package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/internal/pluginbin"
)

// BinaryPrefix starts the file name of every transport or collective
// plugin: plugin "fabric" is the binary gorun-plugin-fabric.
const BinaryPrefix = "gorun-plugin-"

// EnvPath lists directories to search for plugins, separated by colons,
// after --plugin-dir and before the standard directories.
const EnvPath = env.PluginPath

// LocalDir is the plugin directory of `make install`'s default prefix,
// /usr/local.
const LocalDir = "/usr/local/lib/gorun/plugins"

// SystemDir is the system-wide plugin directory of a distribution's
// package (make install PREFIX=/usr).
const SystemDir = "/usr/lib/gorun/plugins"

// Dirs returns the plugin directories in search order: extra (from
// --plugin-dir), then $GORUN_PLUGIN_PATH, then ~/.local/lib/gorun/plugins,
// then /usr/local/lib/gorun/plugins, then /usr/lib/gorun/plugins. Empty
// entries are dropped.
func Dirs(extra []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(d string) {
		if d == "" || seen[d] {
			return
		}
		seen[d] = true
		out = append(out, d)
	}
	for _, d := range extra {
		add(d)
	}
	for _, d := range filepath.SplitList(os.Getenv(EnvPath)) {
		add(d)
	}
	if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, ".local", "lib", "gorun", "plugins"))
	}
	add(LocalDir)
	add(SystemDir)
	return out
}

// Lookup returns the binary of plugin name: the first executable
// gorun-plugin-<name> in Dirs(extra). A name with a slash is a path. When
// that binary fails CheckBinary, Lookup returns its path and the
// *UnsafeError: a later directory's binary of the same name is not taken
// instead, as Discover shows it shadowed.
func Lookup(name string, extra []string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: no plugin name", ErrNotFound)
	}
	if strings.ContainsRune(name, '/') {
		if pluginbin.IsExec(name) {
			return name, CheckBinary(name)
		}
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNotFound, name)
	}
	dirs := Dirs(extra)
	for _, d := range dirs {
		p := filepath.Join(d, BinaryPrefix+name)
		if pluginbin.IsExec(p) {
			return p, CheckBinary(p)
		}
	}
	return "", fmt.Errorf("%w: %s%s in %s (set --plugin-dir or %s)", ErrNotFound, BinaryPrefix, name, strings.Join(dirs, ", "), EnvPath)
}

// problem is err as gorun plugins list shows it: an *UnsafeError without
// the file's name, which the listing shows already.
func problem(err error) string {
	var ue *UnsafeError
	if errors.As(err, &ue) {
		return ue.Problem()
	}
	return err.Error()
}

// Candidate is a plugin binary found in a plugin directory.
type Candidate struct {
	// Name is the plugin's name from its file name.
	Name string
	// Path is the binary.
	Path string
	// Shadowed is set for a binary that an earlier directory's binary of
	// the same name hides.
	Shadowed bool
	// Problem says why the file cannot be a plugin (not executable), or
	// why gorun refuses to run it (CheckBinary), or "".
	Problem string
}

// Discover lists the files named gorun-plugin-* in dirs, in search order.
// Unlike go-plugin's Discover (a glob), it checks that each is an
// executable file that CheckBinary accepts, and marks the ones an earlier
// directory shadows (a refused binary shadows the later ones, as it does
// for Lookup). It runs none of them.
func Discover(dirs []string) []Candidate {
	var out []Candidate
	seen := map[string]bool{}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		var names []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), BinaryPrefix) && len(e.Name()) > len(BinaryPrefix) {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			p := filepath.Join(d, n)
			c := Candidate{Name: strings.TrimPrefix(n, BinaryPrefix), Path: p}
			switch {
			case !pluginbin.IsExec(p):
				c.Problem = "not an executable file"
			case seen[c.Name]:
				c.Shadowed = true
			default:
				seen[c.Name] = true
				if err := CheckBinary(p); err != nil {
					c.Problem = "refused: " + problem(err)
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// Listing is what gorun plugins list shows of one plugin.
type Listing struct {
	Candidate
	Info    Info     `json:"info"`
	Devices []Device `json:"devices"`
	// Err says why the plugin could not be started or asked.
	Err string `json:"error,omitempty"`
}

// Inspect starts the plugin at path outside a job, asks for its
// description and devices, and stops it.
func Inspect(ctx context.Context, path string, o Options) (Info, []Device, error) {
	o.Path, o.Rank, o.Size, o.LocalRank = path, -1, -1, -1
	if o.Log == nil {
		o.Log = io.Discard
	}
	c, err := Open(o)
	if err != nil {
		return Info{}, nil, err
	}
	defer c.Close()
	info := c.Info()
	var devs []Device
	if info.Transport || info.Memory {
		if devs, err = c.Devices(ctx); err != nil {
			return info, nil, err
		}
	}
	return info, devs, nil
}

// List inspects every usable plugin in dirs, several at a time.
func List(ctx context.Context, dirs []string, o Options) []Listing {
	cands := Discover(dirs)
	out := make([]Listing, len(cands))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, c := range cands {
		out[i].Candidate = c
		if c.Problem != "" || c.Shadowed {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			info, devs, err := Inspect(ctx, c.Path, o)
			out[i].Info, out[i].Devices = info, devs
			if err != nil {
				out[i].Err = err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// WriteListing prints what List found in dirs as gorun plugins list
// shows it: one line per plugin (name, version, kind, path, devices), or
// why a file is not usable.
func WriteListing(out io.Writer, dirs []string, ls []Listing) error {
	if len(ls) == 0 {
		_, err := fmt.Fprintf(out, "no plugins (%s*) in %s\n", BinaryPrefix, strings.Join(dirs, ", "))
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSION\tKIND\tPATH\tDEVICES")
	for _, l := range ls {
		why := ""
		switch {
		case l.Problem != "":
			why = l.Problem
		case l.Shadowed:
			why = "shadowed by an earlier directory"
		case l.Err != "":
			msg, _, _ := strings.Cut(l.Err, "\n")
			why = "error: " + msg
		}
		if why != "" {
			fmt.Fprintf(w, "%s\t-\t-\t%s\t(%s)\n", l.Name, l.Path, why)
			continue
		}
		var kind []string
		if l.Info.Transport {
			kind = append(kind, "transport")
		}
		if l.Info.Collective {
			kind = append(kind, "collective")
		}
		if l.Info.Memory {
			kind = append(kind, "device")
		}
		devs := []string{}
		for _, d := range l.Devices {
			s := d.Name
			if d.Provider != "" {
				s += " (" + d.Provider + ")"
			}
			if d.Note != "" {
				s += " [" + d.Note + "]"
			}
			devs = append(devs, s)
		}
		if len(devs) == 0 {
			devs = []string{"-"}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", l.Info.Name, l.Info.Version, strings.Join(kind, "+"), l.Path, strings.Join(devs, ", "))
	}
	return w.Flush()
}
