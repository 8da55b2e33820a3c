package sshclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
)

const (
	defaultConnectTimeout = 10 * time.Second
	defaultMaxHandshakes  = 64
	defaultRetries        = 4
	defaultRetryBase      = 100 * time.Millisecond
	maxJumpDepth          = 8
)

// Options configures a Dialer. The zero value is usable: it reads
// ~/.ssh/config, verifies host keys strictly and dials as the current user.
type Options struct {
	// ConfigFile is the ssh config file (--ssh-config); "" means
	// ~/.ssh/config, which may be missing. An explicit file must exist.
	ConfigFile string
	// Port is the default port (--ssh-port): 0 means the config's Port,
	// else 22. A port from the host list wins over it.
	Port int
	// User is the login user when neither the host list nor the config
	// names one; "" means the current user.
	User string
	// Identities are private key files (-i), tried first.
	Identities []string
	// AcceptNew (--ssh-accept-new) records unknown host keys in the first
	// known_hosts file instead of refusing the host. A changed key is
	// refused all the same.
	AcceptNew bool
	// ConnectTimeout bounds each TCP connect plus SSH handshake; 0 means the
	// config's ConnectTimeout, else 10s.
	ConnectTimeout time.Duration
	// MaxHandshakes bounds the handshakes in flight at once across all Dial
	// calls (not the connections' lives); 0 means 64. sshd's MaxStartups
	// defaults to 10:30:100.
	MaxHandshakes int
	// Retries is how many times a handshake that the server cut (EOF or
	// reset before authentication, as sshd does past MaxStartups) is
	// retried, with exponential backoff and jitter; 0 means 4, negative
	// means none.
	Retries int
	// Log receives notices (retries, recorded host keys, skipped keys);
	// nil discards them.
	Log func(format string, args ...any)
	// Home is the local home directory ("" means os.UserHomeDir):
	// ~/.ssh/config, ~/.ssh/known_hosts and ~/.ssh/id_* come from it.
	Home string
	// AgentSocket is the ssh-agent socket; "" means the config's
	// IdentityAgent, else $SSH_AUTH_SOCK; "none" means no agent.
	AgentSocket string
}

// Dialer dials hosts over SSH. It is safe for concurrent use.
type Dialer struct {
	o          Options
	cfg        *ssh_config.Config
	configName string
	home       string
	localUser  string
	sem        chan struct{}
	retryBase  time.Duration

	keysMu sync.Mutex
	keys   map[string]*keyFile // parsed identity files, by path

	khMu    sync.Mutex
	khCache map[string]*khEntry // known_hosts databases, by file list
	khGen   int                 // bumped whenever we append to a file

	jumpMu sync.Mutex
	jumps  map[string]*jumpEntry

	logMu   sync.Mutex
	logged  map[string]bool
	dummyMu sync.Mutex
	dummy   ssh.PublicKey
}

// NewDialer reads the ssh config and returns a Dialer.
func NewDialer(o Options) (*Dialer, error) {
	d := &Dialer{
		o:         o,
		localUser: currentUser(),
		keys:      map[string]*keyFile{},
		khCache:   map[string]*khEntry{},
		jumps:     map[string]*jumpEntry{},
		logged:    map[string]bool{},
		retryBase: defaultRetryBase,
	}
	d.home = o.Home
	if d.home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("ssh: no home directory: %w", err)
		}
		d.home = h
	}
	if d.o.MaxHandshakes <= 0 {
		d.o.MaxHandshakes = defaultMaxHandshakes
	}
	if d.o.Retries == 0 {
		d.o.Retries = defaultRetries
	} else if d.o.Retries < 0 {
		d.o.Retries = 0
	}
	d.sem = make(chan struct{}, d.o.MaxHandshakes)
	path, explicit := o.ConfigFile, o.ConfigFile != ""
	if !explicit {
		path = filepath.Join(d.home, ".ssh", "config")
	}
	d.configName = path
	cfg, err := loadConfig(path, explicit)
	if err != nil {
		return nil, err
	}
	d.cfg = cfg
	return d, nil
}

func (d *Dialer) logf(format string, args ...any) {
	if d.o.Log != nil {
		d.o.Log(format, args...)
	}
}

// logOnce logs a notice the first time key is seen by this Dialer.
func (d *Dialer) logOnce(key, format string, args ...any) {
	d.logMu.Lock()
	seen := d.logged[key]
	d.logged[key] = true
	d.logMu.Unlock()
	if !seen {
		d.logf(format, args...)
	}
}

// Dial connects to the host alias (as gorun's host list names it, with the
// list's user and port, "" and 0 when it names none), authenticates and
// returns the client. Errors are *HostError.
func (d *Dialer) Dial(ctx context.Context, alias, user string, port int) (*ssh.Client, error) {
	t, err := d.Resolve(alias, user, port)
	if err != nil {
		return nil, hostErr(alias, Other, err, "")
	}
	return d.dialTarget(ctx, t, 0)
}

// clientHosts maps the clients Dial returned to their aliases, for Stage's
// errors. An entry lives as long as its connection.
var clientHosts sync.Map

func hostOf(c *ssh.Client) string {
	if h, ok := clientHosts.Load(c); ok {
		return h.(string)
	}
	return c.RemoteAddr().String()
}

func (d *Dialer) dialTarget(ctx context.Context, t Target, depth int) (*ssh.Client, error) {
	if depth > maxJumpDepth {
		return nil, hostErr(t.Alias, Other, fmt.Errorf("ProxyJump chain deeper than %d hops (a loop in the ssh config?)", maxJumpDepth), "")
	}
	var jump *jumpEntry
	if t.ProxyJump != "" {
		j, err := d.acquireJump(ctx, t, depth)
		if err != nil {
			return nil, err
		}
		defer d.releaseJump(j)
		jump = j
	}
	for attempt := 0; ; attempt++ {
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, hostErr(t.Alias, Other, ctx.Err(), "")
		}
		c, err, retry := d.handshake(ctx, t, jump)
		<-d.sem
		if err == nil {
			clientHosts.Store(c, t.Alias)
			go func() {
				_ = c.Wait()
				clientHosts.Delete(c)
			}()
			return c, nil
		}
		if !retry {
			return nil, err
		}
		if attempt >= d.o.Retries {
			return nil, hostErr(t.Alias, Throttled,
				fmt.Errorf("sshd on %s closed the connection during the handshake %d times: %w", addrWords(t.HostName, t.Port), attempt+1, err),
				"sshd throttles unauthenticated connections (MaxStartups, default 10:30:100): raise MaxStartups in the host's sshd_config, or lower --ssh-parallel")
		}
		delay := d.retryBase << attempt
		delay += time.Duration(rand.Int64N(int64(delay)/2 + 1))
		d.logf("%s: sshd closed the connection during the handshake (MaxStartups?); retry %d in %v", t.Alias, attempt+1, delay.Round(time.Millisecond))
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, hostErr(t.Alias, Other, ctx.Err(), "")
		}
	}
}

func addrWords(host string, port int) string {
	if port == 22 {
		return host
	}
	return host + " port " + strconv.Itoa(port)
}

// handshake does one TCP connect (direct or through jump) and SSH handshake.
// retry reports a handshake that the server cut before authentication.
func (d *Dialer) handshake(ctx context.Context, t Target, jump *jumpEntry) (c *ssh.Client, err error, retry bool) {
	hctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	addr := net.JoinHostPort(t.HostName, strconv.Itoa(t.Port))
	timedOut := func() error {
		if ctx.Err() != nil {
			return hostErr(t.Alias, Other, ctx.Err(), "")
		}
		return hostErr(t.Alias, Unreachable, fmt.Errorf("no answer from %s within %v (connect + handshake)", addrWords(t.HostName, t.Port), t.ConnectTimeout),
			"check that the host is up and reachable, or raise ConnectTimeout in the ssh config")
	}

	var conn net.Conn
	if jump == nil {
		var nd net.Dialer
		conn, err = nd.DialContext(hctx, "tcp", addr)
		if tc, ok := conn.(*net.TCPConn); ok && err == nil {
			conn = newQuickAckConn(tc)
		}
	} else {
		conn, err = jump.client.DialContext(hctx, "tcp", addr)
		if err == nil {
			conn = d.jumpConn(conn, jump)
		}
	}
	if err != nil {
		if hctx.Err() != nil {
			return nil, timedOut(), false
		}
		k := classifyNet(err)
		cause := fmt.Errorf("connect to %s: %w", addrWords(t.HostName, t.Port), err)
		if jump != nil {
			cause = fmt.Errorf("connect to %s from jump host %s: %w", addrWords(t.HostName, t.Port), jump.alias, err)
		}
		hint := ""
		switch {
		case k == Refused:
			hint = "is sshd running there, and is the port right?"
		case jump != nil && strings.Contains(err.Error(), "administratively prohibited"):
			hint = "the jump host's sshd must allow TCP forwarding (AllowTcpForwarding)"
		}
		return nil, hostErr(t.Alias, k, cause, hint), false
	}
	stop := context.AfterFunc(hctx, func() { conn.Close() })

	au := d.newAuth(t)
	defer au.close()
	hk := d.newHostKeyCheck(t)
	cfg := &ssh.ClientConfig{
		User:              t.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeysCallback(au.signers)},
		HostKeyCallback:   hk.check,
		HostKeyAlgorithms: hk.algorithms(),
		ClientVersion:     "SSH-2.0-gorun",
	}
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if !stop() {
		if err == nil {
			sc.Close()
		}
		conn.Close()
		return nil, timedOut(), false
	}
	if err != nil {
		conn.Close()
		switch {
		case hk.err != nil:
			return nil, hk.err, false
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, au.failure(), false
		case cutByServer(err) && !au.started.Load():
			return nil, err, true
		case cutByServer(err):
			return nil, hostErr(t.Alias, Other, fmt.Errorf("sshd on %s closed the connection during authentication: %w", addrWords(t.HostName, t.Port), err), ""), false
		case strings.Contains(err.Error(), "Too many authentication failures"):
			return nil, au.failure(), false
		}
		return nil, hostErr(t.Alias, Other, fmt.Errorf("handshake with %s: %w", addrWords(t.HostName, t.Port), err), ""), false
	}
	return ssh.NewClient(sc, chans, reqs), nil, false
}

// A jumpEntry is a connection to a jump host, shared by every dial that goes
// through it and closed when the last of them is done.
type jumpEntry struct {
	key    string
	alias  string
	ready  chan struct{}
	client *ssh.Client
	err    error
	refs   int // guarded by Dialer.jumpMu
}

// acquireJump returns the (shared) connection to t's jump host, dialing it
// (itself through the rest of the chain) if needed.
func (d *Dialer) acquireJump(ctx context.Context, t Target, depth int) (*jumpEntry, error) {
	hops, err := parseJump(t.ProxyJump)
	if err != nil {
		return nil, hostErr(t.Alias, Other, err, "")
	}
	last := hops[len(hops)-1]
	jt, err := d.Resolve(last.host, last.user, last.port)
	if err != nil {
		return nil, hostErr(t.Alias, Other, fmt.Errorf("jump host %s: %w", last.host, err), "")
	}
	if len(hops) > 1 {
		rest := make([]string, 0, len(hops)-1)
		for _, h := range hops[:len(hops)-1] {
			s := h.host
			if strings.Contains(s, ":") {
				s = "[" + s + "]"
			}
			if h.port > 0 {
				s += ":" + strconv.Itoa(h.port)
			}
			if h.user != "" {
				s = h.user + "@" + s
			}
			rest = append(rest, s)
		}
		jt.ProxyJump = strings.Join(rest, ",")
	}
	key := fmt.Sprintf("%s@%s:%d|%s:%d|%s", jt.User, jt.Alias, jt.Port, jt.HostName, jt.Port, jt.ProxyJump)

	d.jumpMu.Lock()
	e := d.jumps[key]
	if e != nil {
		e.refs++
		d.jumpMu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			go func() { <-e.ready; d.releaseJump(e) }()
			return nil, hostErr(t.Alias, Other, ctx.Err(), "")
		}
	} else {
		e = &jumpEntry{key: key, alias: jt.Alias, ready: make(chan struct{}), refs: 1}
		d.jumps[key] = e
		d.jumpMu.Unlock()
		e.client, e.err = d.dialTarget(context.WithoutCancel(ctx), jt, depth+1)
		if e.err != nil {
			d.jumpMu.Lock()
			if d.jumps[key] == e {
				delete(d.jumps, key)
			}
			d.jumpMu.Unlock()
		} else {
			go func() {
				_ = e.client.Wait()
				d.jumpMu.Lock()
				if d.jumps[key] == e {
					delete(d.jumps, key)
				}
				d.jumpMu.Unlock()
			}()
		}
		close(e.ready)
	}
	if e.err != nil {
		d.releaseJump(e)
		var he *HostError
		if errors.As(e.err, &he) {
			return nil, hostErr(t.Alias, he.Kind, fmt.Errorf("via jump host %s: %w", he.Host, he.Err), he.Hint)
		}
		return nil, hostErr(t.Alias, Other, fmt.Errorf("via jump host %s: %w", jt.Alias, e.err), "")
	}
	return e, nil
}

func (d *Dialer) releaseJump(e *jumpEntry) {
	d.jumpMu.Lock()
	e.refs--
	done := e.refs == 0
	if done && d.jumps[e.key] == e {
		delete(d.jumps, e.key)
	}
	d.jumpMu.Unlock()
	if done && e.client != nil {
		e.client.Close()
	}
}

// jumpConn holds a reference to the jump host's connection for as long as
// the connection tunnelled through it is open.
func (d *Dialer) jumpConn(c net.Conn, e *jumpEntry) net.Conn {
	d.jumpMu.Lock()
	e.refs++
	d.jumpMu.Unlock()
	return &tunnelConn{Conn: c, release: func() { d.releaseJump(e) }}
}

type tunnelConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
