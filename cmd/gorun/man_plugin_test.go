package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/sdk"
)

// pluginPage is the plugin author's page under man/.
const pluginPage = "gorun-plugin.7"

// pluginSection returns the roff source of one .SH section of
// gorun-plugin.7, failing the test with the page's name when it has none.
func pluginSection(t *testing.T, page, title string) string {
	t.Helper()
	if !regexp.MustCompile(`(?m)^\.SH "?` + regexp.QuoteMeta(title) + `"?$`).MatchString(page) {
		t.Fatalf("%s has no .SH %s section", pluginPage, title)
	}
	return manSection(t, page, title)
}

// roffWords turns roff source into the text a reader sees, for phrase
// checks: the arguments of the font macros are unquoted and joined as
// they print (.B and .I with blanks, .BI, .BR and the like without), font
// escapes and \% and \& are dropped, and \- becomes -.
func roffWords(src string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		macro, rest, _ := strings.Cut(l, " ")
		switch macro {
		case ".B", ".I":
			lines[i] = strings.Join(roffArgs(rest), " ")
		case ".BI", ".BR", ".IB", ".IR", ".RB", ".RI":
			lines[i] = strings.Join(roffArgs(rest), "")
		}
	}
	text := regexp.MustCompile(`\\f[A-Z]|\\f\[[A-Z]*\]|\\%|\\&`).ReplaceAllString(strings.Join(lines, "\n"), "")
	return strings.ReplaceAll(text, `\-`, "-")
}

// roffArgs splits a macro's arguments: separated by blanks, or in double
// quotes.
func roffArgs(s string) []string {
	var args []string
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		if s[0] == '"' {
			arg, rest, _ := strings.Cut(s[1:], `"`)
			args, s = append(args, arg), rest
			continue
		}
		arg, rest, _ := strings.Cut(s, " ")
		args, s = append(args, arg), rest
	}
	return args
}

// TestPluginManPageSections checks that gorun-plugin.7 has its sections
// in the order a plugin author needs them.
func TestPluginManPageSections(t *testing.T) {
	t.Parallel()
	page := readManPage(t, pluginPage)
	want := []string{
		"NAME", "SYNOPSIS", "DESCRIPTION", "WRITING A TRANSPORT", "WRITING A COLLECTIVE",
		"WRITING A DEVICE PLUGIN", "BUILDING", "TESTING", "INSTALLING", "USING", "FAILURES", "LOGGING", "ENVIRONMENT",
		"SHIPPED PLUGINS", "FILES", "SEE ALSO",
	}
	var got []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, ".SH ") {
			got = append(got, strings.Trim(strings.TrimPrefix(l, ".SH "), `" `))
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s has the sections\n  %s\nwant\n  %s", pluginPage, strings.Join(got, ", "), strings.Join(want, ", "))
	}
	if !strings.HasPrefix(page, `.TH GORUN\-PLUGIN 7 `) {
		t.Errorf("%s does not start with .TH GORUN\\-PLUGIN 7", pluginPage)
	}
	name := pluginSection(t, page, "NAME")
	if !strings.HasPrefix(strings.TrimSpace(name), `gorun\-plugin \- `) {
		t.Errorf("NAME in %s is %q; want gorun\\-plugin \\- ...", pluginPage, name)
	}
	synopsis := roffWords(pluginSection(t, page, "SYNOPSIS"))
	for _, s := range []string{"sdk.Serve(sdk.Plugin{", `"github.com/gorun/gorun/plugins/sdk"`, "go build -o " + plugins.BinaryPrefix + "NAME"} {
		if !strings.Contains(synopsis, s) {
			t.Errorf("SYNOPSIS in %s does not show %q", pluginPage, s)
		}
	}
	see := pluginSection(t, page, "SEE ALSO")
	for _, ref := range []string{`.BR gorun (1)`, `.BR gorun\-hostfile (5)`} {
		if !strings.Contains(see, ref) {
			t.Errorf("SEE ALSO in %s does not list %s", pluginPage, ref)
		}
	}
}

// TestPluginManPageDocumentsEnvironment checks that ENVIRONMENT in
// gorun-plugin.7 has a .TP entry for every variable through which gorun,
// the ranks and the shipped plugins configure plugins.
func TestPluginManPageDocumentsEnvironment(t *testing.T) {
	t.Parallel()
	envSection := pluginSection(t, readManPage(t, pluginPage), "ENVIRONMENT")
	for _, v := range []string{
		collectives.EnvPlugin,     // GORUN_COLL_PLUGIN
		collectives.EnvTransport,  // GORUN_COLL_TRANSPORT
		collectives.EnvFallback,   // GORUN_COLL_FALLBACK
		collectives.EnvPluginOpts, // GORUN_PLUGIN_OPTS
		plugins.EnvPath,           // GORUN_PLUGIN_PATH
		plugins.EnvLogLevel,       // GORUN_PLUGIN_LOG
		sdk.EnvLogLevel,           // the same variable, as the plugin reads it
		"GORUN_FABRIC_PROVIDER",   // plugins/fabric (a main package)
	} {
		re := regexp.MustCompile(`(?m)^\.TP\n\.B ` + regexp.QuoteMeta(v) + `$`)
		if !re.MatchString(envSection) {
			t.Errorf("ENVIRONMENT in %s has no .TP entry for %s", pluginPage, v)
		}
	}
	if !strings.Contains(envSection, ".B plugin\n") {
		t.Errorf("ENVIRONMENT in %s does not give plugin as a value of %s", pluginPage, collectives.EnvTransport)
	}
}

// TestPluginManPageDocumentsFlags checks that gorun-plugin.7 shows the job
// flags that use a plugin (each as a .TP entry of USING) and the commands
// and flags that list, test and benchmark one.
func TestPluginManPageDocumentsFlags(t *testing.T) {
	t.Parallel()
	page := readManPage(t, pluginPage)
	using := pluginSection(t, page, "USING")
	for _, f := range []string{"plugin", "plugin-opt", "plugin-dir", "fabric-provider", "transport-fallback"} {
		typed := `\-\-` + strings.ReplaceAll(f, "-", `\-`)
		re := regexp.MustCompile(`(?m)^\.TP\n\.B[IR]? "?` + regexp.QuoteMeta(typed) + `(?:[ "]|$)`)
		if !re.MatchString(using) {
			t.Errorf("USING in %s has no .TP entry for --%s (as %s in the roff source)", pluginPage, f, typed)
		}
	}
	usingWords := roffWords(using)
	for _, s := range []string{
		"--plugin-opt provider=",                             // what --fabric-provider means
		"--transport-fallback tcp",                           // the one fallback
		"gorun bench allreduce --transport plugin --plugin ", // benchmarking a plugin
		collectives.EnvTransport + "=plugin",                 // every pair over the plugin
	} {
		if !strings.Contains(usingWords, s) {
			t.Errorf("USING in %s does not say %q", pluginPage, s)
		}
	}

	tests := pluginSection(t, page, "TESTING")
	if !roffFlag(2, "quick").MatchString(tests) {
		t.Errorf(`TESTING in %s does not show --quick (as \-\-quick in the roff source)`, pluginPage)
	}
	testingWords := roffWords(tests)
	for _, s := range []string{"sdktest.Run(", "gorun plugins test ./" + plugins.BinaryPrefix + "NAME", "go test"} {
		if !strings.Contains(testingWords, s) {
			t.Errorf("TESTING in %s does not show %q", pluginPage, s)
		}
	}
	if !strings.Contains(roffWords(pluginSection(t, page, "INSTALLING")), "gorun plugins list") {
		t.Errorf("INSTALLING in %s does not show gorun plugins list", pluginPage)
	}
	if !strings.Contains(roffWords(pluginSection(t, page, "BUILDING")), "go build -o "+plugins.BinaryPrefix) {
		t.Errorf("BUILDING in %s does not show go build -o %sNAME", pluginPage, plugins.BinaryPrefix)
	}
}

// TestPluginManPageSearchOrder checks that INSTALLING in gorun-plugin.7
// gives the plugin directories in the order plugins.Dirs searches them.
func TestPluginManPageSearchOrder(t *testing.T) {
	t.Parallel()
	words := roffWords(pluginSection(t, readManPage(t, pluginPage), "INSTALLING"))
	if !strings.Contains(words, plugins.BinaryPrefix+"NAME") {
		t.Errorf("INSTALLING in %s does not name the file %sNAME", pluginPage, plugins.BinaryPrefix)
	}
	order := []string{"--plugin-dir", plugins.EnvPath, "~/.local/lib/gorun/plugins", plugins.LocalDir, plugins.SystemDir}
	last := -1
	for _, s := range order {
		i := strings.Index(words, s)
		switch {
		case i < 0:
			t.Errorf("INSTALLING in %s does not name %s", pluginPage, s)
		case i < last:
			t.Errorf("INSTALLING in %s names %s out of order; the search order is %s", pluginPage, s, strings.Join(order, ", "))
		default:
			last = i
		}
	}
	// The home directory is the one plugins.Dirs uses.
	if home, err := os.UserHomeDir(); err == nil {
		want := filepath.Join(home, ".local", "lib", "gorun", "plugins")
		dirs := plugins.Dirs(nil)
		if !strings.Contains(strings.Join(dirs, "\n"), want) {
			t.Errorf("plugins.Dirs(nil) = %v, without %s that the page documents", dirs, want)
		}
	}
}

// TestPluginManPageDocumentsAPI checks that the WRITING sections of
// gorun-plugin.7 name every method of the SDK's interfaces and the errors
// an author returns, so that the page follows the API when it changes.
func TestPluginManPageDocumentsAPI(t *testing.T) {
	t.Parallel()
	page := readManPage(t, pluginPage)
	for _, tc := range []struct {
		section string
		types   []reflect.Type
		words   []string
	}{
		{
			"WRITING A TRANSPORT",
			[]reflect.Type{
				reflect.TypeFor[sdk.Transport](), reflect.TypeFor[sdk.Listener](),
				reflect.TypeFor[sdk.SendConn](), reflect.TypeFor[sdk.RecvConn](),
				reflect.TypeFor[sdk.Request](),
			},
			[]string{"sdk.ErrPeerLost", "sdk.ErrClosed", "sdk.ErrBadHandle", "128", "one-way"},
		},
		{
			"WRITING A COLLECTIVE",
			[]reflect.Type{reflect.TypeFor[sdk.Collective]()},
			[]string{"sdk.ErrDeclined", "alone"},
		},
		{
			"WRITING A DEVICE PLUGIN",
			[]reflect.Type{reflect.TypeFor[sdk.Memory]()},
			[]string{"Plugin.Memory", "4096", "sdktest.RunMemory"},
		},
	} {
		sec := roffWords(pluginSection(t, page, tc.section))
		for _, typ := range tc.types {
			if !regexp.MustCompile(`\b` + typ.Name() + `\b`).MatchString(sec) {
				t.Errorf("%s in %s does not name sdk.%s", tc.section, pluginPage, typ.Name())
			}
			for i := range typ.NumMethod() {
				m := typ.Method(i).Name
				if !regexp.MustCompile(`\b` + m + `\b`).MatchString(sec) {
					t.Errorf("%s in %s does not name %s.%s", tc.section, pluginPage, typ.Name(), m)
				}
			}
		}
		for _, w := range tc.words {
			if !strings.Contains(sec, w) {
				t.Errorf("%s in %s does not say %q", tc.section, pluginPage, w)
			}
		}
	}
	failures := roffWords(pluginSection(t, page, "FAILURES"))
	for _, w := range []string{"transport.ErrTransportLost", "transport.ErrPeerLost", "--transport-fallback tcp"} {
		if !strings.Contains(failures, w) {
			t.Errorf("FAILURES in %s does not say %q", pluginPage, w)
		}
	}
}
