package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/rendezvous"
)

// manDir is the repository's man directory, seen from this package.
var manDir = filepath.Join("..", "..", "man")

// readManPage returns the roff source of a page under man/.
func readManPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(manDir, name))
	if err != nil {
		t.Fatalf("read the man page: %v", err)
	}
	return string(b)
}

// manSection returns the roff source of one .SH section of page: from the
// line after its heading to the next .SH. title is written as in the
// heading, without quotes.
func manSection(t *testing.T, page, title string) string {
	t.Helper()
	lines := strings.Split(page, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, ".SH ") && strings.Trim(strings.TrimPrefix(l, ".SH "), `" `) == title {
			start = i + 1
			break
		}
	}
	if start < 0 {
		t.Fatalf("gorun.1 has no .SH %s section", title)
	}
	end := len(lines)
	for i := start; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], ".SH ") {
			end = i
			break
		}
	}
	return strings.Join(lines[start:end], "\n")
}

// roffFlag returns a regexp that finds a flag in roff source as it is
// typed, with every hyphen escaped: \-np, \-\-map\-by. It must not run on
// into a longer name (\-n is not found in \-np, \-\-host not in
// \-\-hostfile), and a single-dash form must not be the tail of a
// double-dash one.
func roffFlag(dashes int, name string) *regexp.Regexp {
	typed := strings.Repeat(`\-`, dashes) + strings.ReplaceAll(name, "-", `\-`)
	return regexp.MustCompile(`(?:^|[^-])` + regexp.QuoteMeta(typed) + `(?:$|[^A-Za-z0-9_\\]|\\[^-])`)
}

// TestManPageDocumentsEveryFlag checks that OPTIONS in man/gorun.1 names
// every flag of the main command and every alias, written as they are
// typed: names of one or two letters (n, H, N, np, x) with a single dash,
// as Go flags take them, and every name longer than one letter with two.
func TestManPageDocumentsEveryFlag(t *testing.T) {
	t.Parallel()
	opts := manSection(t, readManPage(t, "gorun.1"), "OPTIONS")
	check := func(dashes int, name string) {
		t.Helper()
		if !roffFlag(dashes, name).MatchString(opts) {
			t.Errorf("OPTIONS in man/gorun.1 does not show %s%s (as %s in the roff source)",
				strings.Repeat("-", dashes), name, strings.Repeat(`\-`, dashes)+strings.ReplaceAll(name, "-", `\-`))
		}
	}
	for _, s := range settings {
		if s.hidden {
			continue // not for users: neither in --help nor in the manual
		}
		for _, n := range append([]string{s.name}, s.aliases...) {
			if len(n) <= 2 {
				check(1, n)
			}
			if len(n) >= 2 {
				check(2, n)
			}
		}
	}
	// urfave/cli's own flags.
	check(1, "h")
	check(2, "help")
	check(2, "version")
}

// TestHelpShowsEveryFlag checks that gorun --help, whose options are
// rendered only when help is shown (helpExtra), lists every visible
// setting with its default, and the commands.
func TestHelpShowsEveryFlag(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := newApp(&out, &errb).Run([]string{"gorun", "--help"}); err != nil {
		t.Fatalf("gorun --help: %v\n%s", err, errb.String())
	}
	help := out.String()
	for _, want := range []string{"OPTIONS:", "COMMANDS:", "EXAMPLES", "--version"} {
		if !strings.Contains(help, want) {
			t.Errorf("gorun --help lacks %q:\n%s", want, help)
		}
	}
	for _, s := range settings {
		if s.hidden {
			continue
		}
		if names := strings.Join(s.names(), ", "); !strings.Contains(help, "\n   "+names+" ") {
			t.Errorf("gorun --help does not list %s", names)
		}
	}
	if !strings.Contains(help, "(default: "+rendezvous.DefaultRankBudget.String()+")") {
		t.Errorf("gorun --help does not show --kv-rank-budget's default")
	}
}

// TestManPageDocumentsEveryCommand checks that COMMANDS in man/gorun.1 has
// an entry for every subcommand users can see.
func TestManPageDocumentsEveryCommand(t *testing.T) {
	t.Parallel()
	cmds := manSection(t, readManPage(t, "gorun.1"), "COMMANDS")
	for _, c := range newApp(io.Discard, io.Discard).Commands {
		if c.Hidden {
			continue
		}
		re := regexp.MustCompile(`(?m)^\.TP\n\.BR? ` + regexp.QuoteMeta(c.Name) + `(?:$| )`)
		if !re.MatchString(cmds) {
			t.Errorf("COMMANDS in man/gorun.1 has no .TP entry for %q", c.Name)
		}
	}
}

// exitEntries parses the .TP entries of EXIT STATUS: the tag (0, N,
// 128+N, ...) and the words that follow it, without roff requests.
func exitEntries(section string) map[string]string {
	out := map[string]string{}
	lines := strings.Split(section, "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != ".TP" || i+1 >= len(lines) {
			continue
		}
		tag := roffText(lines[i+1])
		var desc []string
		for j := i + 2; j < len(lines) && !strings.HasPrefix(lines[j], ".TP") &&
			!strings.HasPrefix(lines[j], ".PP") && !strings.HasPrefix(lines[j], ".SH"); j++ {
			desc = append(desc, roffText(lines[j]))
		}
		out[strings.ReplaceAll(tag, " ", "")] = strings.Join(desc, " ")
	}
	return out
}

// roffText turns one line of roff into its words: font macros and escapes
// are dropped.
func roffText(line string) string {
	if strings.HasPrefix(line, ".") {
		_, line, _ = strings.Cut(line, " ")
		line = strings.ReplaceAll(line, `"`, "")
	}
	line = regexp.MustCompile(`\\f[A-Z]`).ReplaceAllString(line, "")
	return strings.ReplaceAll(line, `\-`, "-")
}

// TestManPageExitStatus checks that EXIT STATUS in man/gorun.1 lists
// exactly gorun's own exit codes (the launcher's constants and those in
// --help), each with its meaning, plus the codes passed on from a rank.
func TestManPageExitStatus(t *testing.T) {
	t.Parallel()
	entries := exitEntries(manSection(t, readManPage(t, "gorun.1"), "EXIT STATUS"))
	want := []struct {
		code int
		name string
		says string // a phrase the entry's text must contain
	}{
		{launcher.ExitOK, "ExitOK", "every rank exited 0"},
		{launcher.ExitUsage, "ExitUsage", "usage"},
		{launcher.ExitTimeout, "ExitTimeout", "--timeout"},
		{launcher.ExitHang, "ExitHang", "--hang-timeout"},
		{launcher.ExitLaunch, "ExitLaunch", "agent was lost"},
		{launcher.ExitNotExec, "ExitNotExec", "not executable"},
		{launcher.ExitNotFound, "ExitNotFound", "not found"},
	}
	var codes []int
	for _, w := range want {
		codes = append(codes, w.code)
		desc, ok := entries[strconv.Itoa(w.code)]
		if !ok {
			t.Errorf("EXIT STATUS in man/gorun.1 has no entry for %d (launcher.%s)", w.code, w.name)
			continue
		}
		if !strings.Contains(strings.ToLower(desc), w.says) {
			t.Errorf("EXIT STATUS in man/gorun.1: %d (launcher.%s) is described as %q, which does not say %q",
				w.code, w.name, desc, w.says)
		}
	}
	for _, tag := range []string{"N", "128+N"} {
		if _, ok := entries[tag]; !ok {
			t.Errorf("EXIT STATUS in man/gorun.1 has no entry for %s", tag)
		}
	}
	for tag := range entries {
		n, err := strconv.Atoi(tag)
		if err == nil && !slices.Contains(codes, n) {
			t.Errorf("EXIT STATUS in man/gorun.1 lists %d, which is none of the launcher's exit codes", n)
		}
	}

	// The help text lists the same codes.
	_, helpStatus, ok := strings.Cut(examples, "EXIT STATUS:")
	if !ok {
		t.Fatal("the help text has no EXIT STATUS")
	}
	helpStatus, _, _ = strings.Cut(helpStatus, "\n\n")
	var help []int
	for _, m := range regexp.MustCompile(`\b(\d+) {2,}`).FindAllStringSubmatch(helpStatus, -1) {
		n, _ := strconv.Atoi(m[1])
		help = append(help, n)
	}
	slices.Sort(help)
	slices.Sort(codes)
	if !slices.Equal(help, codes) {
		t.Errorf("the help text's EXIT STATUS lists codes %v; the man page and the launcher have %v", help, codes)
	}
}

// TestManPagesRender renders every page under man/ with man(1), and the
// plugin author's page also with groff's -ww (every warning), and wants no
// warnings and the sections each page must show. It needs man-db and
// groff (package testenv decides whether their absence skips or fails).
func TestManPagesRender(t *testing.T) {
	t.Parallel()
	man := []string{"--warnings", "-E", "UTF-8", "-l"}
	groff := []string{"-man", "-Tutf8", "-ww", "-P-cbou"} // -P-cbou: plain text
	for _, tc := range []struct {
		page, bin string
		args      []string // before the page's path
		sections  []string // headings the rendering must show
	}{
		{"gorun.1", "man", man, []string{"NAME"}},
		{"gorun-hostfile.5", "man", man, []string{"NAME"}},
		{pluginPage, "man", man, []string{"NAME", "WRITING A TRANSPORT"}},
		{pluginPage, "groff", groff, []string{"NAME", "WRITING A TRANSPORT"}},
	} {
		t.Run(tc.page+"/"+tc.bin, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(manDir, tc.page)
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("missing man page: %v", err)
			}
			bin := testenv.NeedTool(t, tc.bin, "man-db groff-base")
			args := append(slices.Clone(tc.args), path)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "MAN_KEEP_FORMATTING=")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			line := tc.bin + " " + strings.Join(args, " ")
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, errb.String())
			}
			if errb.Len() > 0 {
				t.Errorf("%s printed on stderr:\n%s", line, errb.String())
			}
			for _, sec := range tc.sections {
				if !strings.Contains(out.String(), sec) {
					t.Errorf("%s rendered no %s section; stdout:\n%s", line, sec, out.String())
				}
			}
		})
	}
}

// TestManPageDocumentsBenchFlags checks that the bench entry of COMMANDS
// shows every flag of its own (the job's are in OPTIONS).
func TestManPageDocumentsBenchFlags(t *testing.T) {
	t.Parallel()
	cmds := manSection(t, readManPage(t, "gorun.1"), "COMMANDS")
	commandShowsFlags(t, cmds, "bench", benchCommand(io.Discard, io.Discard).Flags)
}

// commandShowsFlags checks that cmds, the COMMANDS section, shows each of
// a command's flags that is not a job's (those are in OPTIONS).
func commandShowsFlags(t *testing.T, cmds, command string, flags []cli.Flag) {
	t.Helper()
	job := map[string]bool{}
	for _, s := range settings {
		job[s.name] = true
		for _, a := range s.aliases {
			job[a] = true
		}
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if job[n] {
				continue
			}
			dashes := 2
			if len(n) == 1 {
				dashes = 1
			}
			if !roffFlag(dashes, n).MatchString(cmds) {
				t.Errorf("the %s entry of COMMANDS does not show %s%s", command, strings.Repeat("-", dashes), n)
			}
		}
	}
}
