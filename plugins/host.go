package plugins

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/gorun/gorun/internal/filetrust"
	"github.com/gorun/gorun/internal/pluginbin"
)

// Spec says which plugin to start and how to talk to it.
type Spec struct {
	// Name is the plugin's name in messages ("pmix").
	Name string
	// Path is the plugin binary.
	Path string
	// Args are the binary's arguments, if any.
	Args []string
	// Handshake must match the plugin's: a mismatch (a binary that is not
	// this plugin, or another version of it) fails the start with an error.
	Handshake plugin.HandshakeConfig
	// Plugins is the set the plugin serves; Dispense takes Name from it.
	Plugins plugin.PluginSet
	// VersionedPlugins, when set, replaces Plugins: one set per API
	// version the host speaks; go-plugin picks the highest the plugin
	// speaks too. Dispense takes DispenseName from it.
	VersionedPlugins map[int]plugin.PluginSet
	// DispenseName is the plugin to dispense when it differs from Name.
	DispenseName string
	// ExtraFiles are passed to the plugin as descriptors 3, 4, ...
	ExtraFiles []*os.File
	// Logger, when set, receives the plugin's log entries (hclog JSON on
	// its standard error), named after the plugin; otherwise they are
	// not logged.
	Logger hclog.Logger
	// Env is added to the plugin's environment.
	Env []string
	// Stderr receives the plugin's own standard error (nil: discarded).
	Stderr io.Writer
	// StartTimeout bounds the handshake (default 20s).
	StartTimeout time.Duration
	// SocketDir is where the plugin's gRPC socket is made (default: the
	// system's temporary directory); go-plugin makes a private directory
	// inside it.
	SocketDir string
	// PrivateSocket skips go-plugin's automatic mutual TLS when SocketDir
	// is a directory that only this user can open (checked): the socket's
	// directory is then the boundary, and TLS would only cost time (about
	// 40 ms here: a P-521 key on each side and a handshake) against
	// someone who is already this user. Otherwise the connection uses
	// AutoMTLS.
	PrivateSocket bool
}

// privateDir reports whether dir is a directory owned by this user that
// nobody else can enter.
func privateDir(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm()&0o077 != 0 {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Getuid()
}

// Plugin is a started plugin process.
type Plugin struct {
	spec   Spec
	client *plugin.Client
	// Service is what the plugin set's GRPCClient returned for Spec.Name.
	Service any
}

// Start starts the plugin binary and returns its service. The process runs
// in its own process group and is killed if this process dies, even by
// SIGKILL (go-plugin's own clean-up cannot run then). A binary that
// CheckBinary refuses is not started: the error wraps its *UnsafeError.
// The plugin gets this process's environment without SecretEnv, and
// Spec.Env.
func Start(s Spec) (*Plugin, error) {
	if s.StartTimeout <= 0 {
		s.StartTimeout = 20 * time.Second
	}
	st, err := os.Stat(s.Path)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Name, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("plugin %s: %s is not an executable file", s.Name, s.Path)
	}
	// Checked here, where every plugin starts: nobody but this user and
	// root can change what it checked, so the file that runs next is the
	// file that was checked.
	if err := CheckBinary(s.Path); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Name, err)
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = append(pluginbin.Environ(os.Environ()), s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.ExtraFiles = s.ExtraFiles
	stderr := s.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	var sock *plugin.UnixSocketConfig
	if s.SocketDir != "" {
		sock = &plugin.UnixSocketConfig{TempDir: s.SocketDir}
	}
	logger := s.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{
			// Off: go-plugin would log the plugin's end as an error even
			// when it was killed on purpose; failures to start come back
			// as errors, and the plugin's own stderr is passed on.
			Name: "plugin-" + s.Name, Level: hclog.Off, Output: stderr,
		})
	}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  s.Handshake,
		Plugins:          s.Plugins,
		VersionedPlugins: s.VersionedPlugins,
		Cmd:              cmd,
		// cmd.Env is the whole environment: go-plugin would otherwise
		// append this process's own, secrets and all, after Spec.Env.
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         !(s.PrivateSocket && s.SocketDir != "" && privateDir(s.SocketDir)),
		StartTimeout:     s.StartTimeout,
		Stderr:           stderr,
		SyncStdout:       stderr,
		SyncStderr:       stderr,
		Managed:          false,
		UnixSocketConfig: sock,
		Logger:           logger,
	})
	proto, err := c.Client()
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("plugin %s (%s): %s", s.Name, s.Path, cleanErr(err))
	}
	name := s.Name
	if s.DispenseName != "" {
		name = s.DispenseName
	}
	svc, err := proto.Dispense(name)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("plugin %s (%s): %w", s.Name, s.Path, err)
	}
	return &Plugin{spec: s, client: c, Service: svc}, nil
}

// Exited reports whether the plugin process has ended.
func (p *Plugin) Exited() bool { return p.client.Exited() }

// Stop asks the plugin to exit and kills it if it does not within a few
// seconds (go-plugin's graceful shutdown).
func (p *Plugin) Stop() { p.client.Kill() }

// Kill ends the plugin's process group at once (SIGKILL), for a plugin
// with nothing left to save, and releases the connection.
func (p *Plugin) Kill() {
	if rc := p.client.ReattachConfig(); rc != nil && rc.Pid > 0 {
		syscall.Kill(-rc.Pid, syscall.SIGKILL)
	}
	p.client.Kill()
}

// cleanErr shortens go-plugin's handshake errors to their first line.
func cleanErr(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// ErrNotFound is returned by Find when no plugin binary is found.
var ErrNotFound = pluginbin.ErrNotFound

// Find looks for the plugin binary named name: in the directories of dirs
// first (in order), then in PATH (see [pluginbin.Find]).
func Find(name string, dirs ...string) (string, []string, error) {
	return pluginbin.Find(name, dirs...)
}

// SecretEnv names the variables that Start never passes on to a plugin
// (see [pluginbin.SecretEnv]).
var SecretEnv = pluginbin.SecretEnv

// ErrUnsafe is wrapped by the errors of a plugin binary that gorun refuses
// to run (see [pluginbin.CheckBinary]).
var ErrUnsafe = filetrust.ErrUnsafe

// UnsafeError says why gorun refuses to run a plugin binary.
type UnsafeError = filetrust.UnsafeError

// CheckBinary returns an *UnsafeError when a user other than this
// process's user or root could have written the binary at path or could
// replace it before it runs (see [pluginbin.CheckBinary]).
func CheckBinary(path string) error { return pluginbin.CheckBinary(path) }
