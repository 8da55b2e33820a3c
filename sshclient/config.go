package sshclient

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kevinburke/ssh_config"
)

// Target is a host as gorun's host list names it, resolved through the ssh
// config: where to connect, as whom, with which keys and through which jump
// hosts.
type Target struct {
	// Alias is the host as the host list names it (OpenSSH's "host as typed",
	// matched against the config's Host patterns).
	Alias string
	// HostName is the name or address to connect to: the config's HostName,
	// else Alias. An alias is never resolved through DNS when the config
	// gives a HostName.
	HostName string
	// Port is the TCP port.
	Port int
	// User is the remote login user.
	User string
	// IdentityFiles are the -i files then the config's IdentityFile lines,
	// with ~ and %-tokens expanded. When empty, OpenSSH's default keys
	// (~/.ssh/id_ed25519, id_ecdsa, id_rsa) are tried after the agent.
	IdentityFiles []string
	// IdentitiesOnly is the config's IdentitiesOnly: use only the identity
	// files (the agent only for keys that match them).
	IdentitiesOnly bool
	// ProxyJump is the config's ProxyJump: one jump host or a comma-separated
	// chain, each "[user@]host[:port]" or "ssh://[user@]host[:port]"; "" for
	// none.
	ProxyJump string
	// KnownHosts are the known_hosts files (UserKnownHostsFile), in order;
	// new keys are recorded in the first.
	KnownHosts []string
	// HostKeyAlias, when set, is the name host keys are looked up and
	// recorded under instead of Alias and HostName.
	HostKeyAlias string
	// StrictHostKeyChecking is "yes", "accept-new" or "no" (the config's
	// value; "ask" counts as "yes", since gorun never prompts;
	// Options.AcceptNew makes it "accept-new"). "no" accepts unknown keys
	// without recording them; a changed key is refused whatever it says.
	StrictHostKeyChecking string
	// ConnectTimeout bounds each TCP connect plus SSH handshake.
	ConnectTimeout time.Duration
	// IdentityAgent is the ssh-agent socket, or "" for none.
	IdentityAgent string
}

// Resolve resolves alias through the ssh config. user and port come from
// gorun's host list ("" and 0 when it says nothing) and win over the config;
// the config wins over Options.User and the defaults, except that
// Options.Port (--ssh-port), when set, wins over the config's Port as ssh -p
// does.
func (d *Dialer) Resolve(alias, user string, port int) (Target, error) {
	alias = strings.TrimSuffix(strings.TrimPrefix(alias, "["), "]")
	if alias == "" {
		return Target{}, errors.New("empty host name")
	}
	t := Target{Alias: alias}
	get := func(key string) string { return d.get(alias, key) }

	t.HostName = alias
	if hn := get("HostName"); hn != "" {
		hn = strings.NewReplacer("%%", "%", "%h", alias).Replace(hn)
		t.HostName = strings.TrimSuffix(strings.TrimPrefix(hn, "["), "]")
	}

	switch {
	case user != "":
		t.User = user
	case get("User") != "":
		t.User = get("User")
	case d.o.User != "":
		t.User = d.o.User
	default:
		t.User = d.localUser
	}

	switch {
	case port > 0:
		t.Port = port
	case d.o.Port > 0:
		t.Port = d.o.Port
	case get("Port") != "":
		p, err := strconv.Atoi(get("Port"))
		if err != nil || p <= 0 || p > 65535 {
			return Target{}, fmt.Errorf("%s: bad Port %q for host %s", d.configName, get("Port"), alias)
		}
		t.Port = p
	default:
		t.Port = 22
	}
	if t.Port <= 0 || t.Port > 65535 {
		return Target{}, fmt.Errorf("bad port %d for host %s", t.Port, alias)
	}

	expand := func(s string) string { return d.expand(s, &t) }
	for _, f := range d.o.Identities {
		t.IdentityFiles = appendUnique(t.IdentityFiles, expand(f))
	}
	for _, f := range d.getAll(alias, "IdentityFile") {
		if strings.EqualFold(f, "none") {
			continue
		}
		t.IdentityFiles = appendUnique(t.IdentityFiles, expand(f))
	}
	t.IdentitiesOnly = strings.EqualFold(get("IdentitiesOnly"), "yes")

	if pj := get("ProxyJump"); pj != "" && !strings.EqualFold(pj, "none") {
		t.ProxyJump = pj
	}

	if khs := get("UserKnownHostsFile"); khs != "" {
		for _, f := range strings.Fields(khs) {
			if strings.EqualFold(f, "none") {
				continue
			}
			t.KnownHosts = appendUnique(t.KnownHosts, expand(f))
		}
	} else {
		t.KnownHosts = []string{
			filepath.Join(d.home, ".ssh", "known_hosts"),
			filepath.Join(d.home, ".ssh", "known_hosts2"),
		}
	}
	t.HostKeyAlias = get("HostKeyAlias")

	switch v := strings.ToLower(get("StrictHostKeyChecking")); {
	case d.o.AcceptNew:
		t.StrictHostKeyChecking = "accept-new"
	case v == "no" || v == "off":
		t.StrictHostKeyChecking = "no"
	case v == "accept-new":
		t.StrictHostKeyChecking = "accept-new"
	default:
		t.StrictHostKeyChecking = "yes"
	}

	switch {
	case d.o.ConnectTimeout > 0:
		t.ConnectTimeout = d.o.ConnectTimeout
	case get("ConnectTimeout") != "":
		s, err := strconv.Atoi(get("ConnectTimeout"))
		if err != nil || s < 0 {
			return Target{}, fmt.Errorf("%s: bad ConnectTimeout %q for host %s", d.configName, get("ConnectTimeout"), alias)
		}
		t.ConnectTimeout = time.Duration(s) * time.Second
	}
	if t.ConnectTimeout <= 0 {
		t.ConnectTimeout = defaultConnectTimeout
	}

	switch ia := get("IdentityAgent"); {
	case d.o.AgentSocket != "":
		t.IdentityAgent = d.o.AgentSocket
	case ia == "" || ia == "SSH_AUTH_SOCK":
		t.IdentityAgent = os.Getenv("SSH_AUTH_SOCK")
	case strings.HasPrefix(ia, "$"):
		t.IdentityAgent = os.Getenv(strings.Trim(ia[1:], "{}"))
	default:
		t.IdentityAgent = expand(ia)
	}
	if strings.EqualFold(t.IdentityAgent, "none") {
		t.IdentityAgent = ""
	}
	return t, nil
}

// get returns the first value of key for alias in the config (OpenSSH's first
// match wins), unquoted.
func (d *Dialer) get(alias, key string) string {
	if d.cfg == nil {
		return ""
	}
	v, err := d.cfg.Get(alias, key)
	if err != nil {
		return ""
	}
	return unquote(strings.TrimSpace(v))
}

func (d *Dialer) getAll(alias, key string) []string {
	if d.cfg == nil {
		return nil
	}
	vs, err := d.cfg.GetAll(alias, key)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		if v = unquote(strings.TrimSpace(v)); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// expand expands a leading ~ and OpenSSH's %-tokens in a file name: %% %d
// (local home) %h (HostName) %n (alias) %p (port) %r (remote user) %u (local
// user) %l (local host name) %i (local uid).
func (d *Dialer) expand(s string, t *Target) string {
	if s == "~" {
		s = d.home
	} else if strings.HasPrefix(s, "~/") {
		s = filepath.Join(d.home, s[2:])
	}
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'd':
			b.WriteString(d.home)
		case 'h':
			b.WriteString(t.HostName)
		case 'n':
			b.WriteString(t.Alias)
		case 'p':
			b.WriteString(strconv.Itoa(t.Port))
		case 'r':
			b.WriteString(t.User)
		case 'u':
			b.WriteString(d.localUser)
		case 'l':
			h, _ := os.Hostname()
			b.WriteString(h)
		case 'i':
			b.WriteString(strconv.Itoa(os.Getuid()))
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// loadConfig reads the ssh config file; a missing default file is no config.
func loadConfig(path string, explicit bool) (*ssh_config.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("ssh config: %w", err)
	}
	defer f.Close()
	cfg, err := ssh_config.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("ssh config %s: %w", path, err)
	}
	return cfg, nil
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "root"
}

// jumpHop is one hop of a ProxyJump chain.
type jumpHop struct {
	host, user string
	port       int
}

// parseJump parses a ProxyJump value into hops, first hop first.
func parseJump(spec string) ([]jumpHop, error) {
	var hops []jumpHop
	for _, part := range strings.Split(spec, ",") {
		s := strings.TrimSpace(part)
		s = strings.TrimPrefix(s, "ssh://")
		s = strings.TrimSuffix(s, "/")
		if s == "" {
			return nil, fmt.Errorf("bad ProxyJump %q: empty hop", spec)
		}
		var h jumpHop
		if i := strings.LastIndex(s, "@"); i >= 0 {
			h.user, s = s[:i], s[i+1:]
		}
		host, portStr, err := net.SplitHostPort(s)
		switch {
		case err == nil:
			p, perr := strconv.Atoi(portStr)
			if perr != nil || p <= 0 || p > 65535 {
				return nil, fmt.Errorf("bad ProxyJump %q: bad port %q", spec, portStr)
			}
			h.host, h.port = host, p
		case strings.Count(s, ":") > 1: // bare IPv6 literal
			h.host = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		default:
			h.host = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		}
		if h.host == "" {
			return nil, fmt.Errorf("bad ProxyJump %q: empty host", spec)
		}
		hops = append(hops, h)
	}
	return hops, nil
}

// tildePath abbreviates the home directory as ~ for messages.
func (d *Dialer) tildePath(p string) string {
	if d.home != "" && strings.HasPrefix(p, d.home+"/") {
		return "~" + p[len(d.home):]
	}
	return p
}
