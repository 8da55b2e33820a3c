package sshclient

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func dialOK(t *testing.T, d *Dialer, alias string) *ssh.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, alias, "", 0)
	if err != nil {
		t.Fatalf("Dial(%s): %v", alias, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dialErr(t *testing.T, d *Dialer, alias string, want Kind) *HostError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, alias, "", 0)
	if err == nil {
		c.Close()
		t.Fatalf("Dial(%s) succeeded, want %v", alias, want)
	}
	var he *HostError
	if !errors.As(err, &he) {
		t.Fatalf("Dial(%s): %T %v, want a *HostError", alias, err, err)
	}
	if he.Kind != want || he.Host != alias {
		t.Fatalf("Dial(%s): %v (kind %v, host %q), want kind %v", alias, err, he.Kind, he.Host, want)
	}
	t.Logf("Dial(%s): %v", alias, err)
	return he
}

func TestAuthIdentityFile(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newEnv(t)
	idPath := filepath.Join(e.home, "keys", "cluster_key")
	writeKey(t, idPath, key, "")
	e.writeConfig(hostBlock("h1", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())

	d := e.dialer(Options{Identities: []string{idPath}, User: "tester"})
	c := dialOK(t, d, "h1")
	if got := run(t, c, "echo hello"); got != "hello\n" {
		t.Errorf("exec: %q", got)
	}
	if c.User() != "tester" {
		t.Errorf("user %q", c.User())
	}
}

func TestAuthConfigAndDefaultKeys(t *testing.T) {
	t.Parallel()
	cfgKey, defKey := newKey(t), newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, cfgKey), pubOf(t, defKey)})
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "h1_key"), cfgKey, "")
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), defKey, "")
	e.writeConfig(hostBlock("h1", s, "IdentityFile %d/.ssh/%n_key") + hostBlock("h2", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	d := e.dialer(Options{})
	dialOK(t, d, "h1") // IdentityFile with tokens
	dialOK(t, d, "h2") // ~/.ssh/id_ed25519
}

func TestAuthAgent(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	sock := startAgent(t, key)
	e := newEnv(t)
	// An encrypted copy of the key: usable only through the agent.
	writeKey(t, filepath.Join(e.home, ".ssh", "enc_key"), key, "secret")
	e.writeConfig(hostBlock("h1", s) +
		hostBlock("only", s, "IdentitiesOnly yes", "IdentityFile ~/.ssh/enc_key") +
		hostBlock("enc", s, "IdentityFile ~/.ssh/enc_key"))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())

	dialOK(t, e.dialer(Options{AgentSocket: sock}), "h1")
	dialOK(t, e.dialer(Options{AgentSocket: sock}), "only")

	// Without the agent the encrypted key is skipped, with a notice.
	he := dialErr(t, e.dialer(Options{}), "enc", AuthFailed)
	if !strings.Contains(he.Error(), "passphrase") || !strings.Contains(e.logText(), "passphrase-protected") {
		t.Errorf("error %q, log %q: want the encrypted key named", he, e.logText())
	}
}

func TestAuthIdentitiesOnlyIgnoresOtherAgentKeys(t *testing.T) {
	t.Parallel()
	agentKey, fileKey := newKey(t), newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, agentKey)})
	sock := startAgent(t, agentKey)
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, "k"), fileKey, "")
	e.writeConfig(hostBlock("h1", s, "IdentitiesOnly yes", "IdentityFile ~/k"))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	dialErr(t, e.dialer(Options{AgentSocket: sock}), "h1", AuthFailed)
}

func TestAuthFailedListsIdentities(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, newKey(t))})
	e := newEnv(t)
	wrong := newKey(t)
	idPath := filepath.Join(e.home, "wrong_key")
	writeKey(t, idPath, wrong, "")
	e.writeConfig(hostBlock("h1", s, "User deploy"))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	he := dialErr(t, e.dialer(Options{Identities: []string{idPath, filepath.Join(e.home, "missing_key")}}), "h1", AuthFailed)
	msg := he.Error()
	for _, want := range []string{"h1: authentication failed", "deploy@", "~/wrong_key", ssh.FingerprintSHA256(pubOf(t, wrong)), "~/missing_key (no such file)", "authorized_keys"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestKnownHostByAliasAndHashed(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("byalias", s) + hostBlock("hashed", s, "HostKeyAlias hashed-alias"))
	// Recorded for the alias only (as typed), not for 127.0.0.1.
	e.addKnown([]string{addr("byalias", s.port)}, s.hostKey())
	// A hashed entry (ssh-keyscan -H) for the HostKeyAlias.
	e.appendKnown(knownhosts.HashHostname(knownhosts.Normalize(addr("hashed-alias", s.port))) + " " +
		strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.hostKey()))))
	d := e.dialer(Options{})
	dialOK(t, d, "byalias")
	dialOK(t, d, "hashed")
}

func TestHostKeyAlgorithmFromKnownHosts(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	ecKey, edKey := newECDSASigner(t), newSigner(t)
	// The server has two host keys; known_hosts has only the ECDSA one,
	// which x/crypto would not pick by default (it prefers nothing we know).
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, withHostKeys(edKey, ecKey))
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("h1", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, ecKey.PublicKey())
	dialOK(t, e.dialer(Options{}), "h1")

	e2 := newEnv(t)
	writeKey(t, filepath.Join(e2.home, ".ssh", "id_ed25519"), key, "")
	e2.writeConfig(hostBlock("h1", s))
	e2.addKnown([]string{addr("127.0.0.1", s.port)}, edKey.PublicKey())
	dialOK(t, e2.dialer(Options{}), "h1")
}

func TestUnknownHostKey(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("h3", s))
	he := dialErr(t, e.dialer(Options{}), "h3", HostKeyUnknown)
	msg := he.Error()
	for _, want := range []string{
		"h3: host key unknown",
		ssh.FingerprintSHA256(s.hostKey()),
		"ssh-keyscan -H -p " + itoa(s.port) + " 127.0.0.1 >> ~/.ssh/known_hosts",
		"--ssh-accept-new",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestAcceptNew(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, "id"), key, "")
	e.writeConfig(hostBlock("h3", s, "IdentityFile ~/id"))

	// Concurrent dials with AcceptNew record the key once.
	d := e.dialer(Options{AcceptNew: true})
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.Dial(context.Background(), "h3", "", 0)
			if err != nil {
				t.Error(err)
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
	st, err := os.Stat(filepath.Join(e.home, ".ssh"))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("~/.ssh: %v %v", st, err)
	}
	st, err = os.Stat(e.knownHostsFile())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("known_hosts: %v %v", st, err)
	}
	data, _ := os.ReadFile(e.knownHostsFile())
	if n := strings.Count(string(data), "\n"); n != 1 {
		t.Errorf("known_hosts has %d lines, want 1:\n%s", n, data)
	}
	if !strings.HasPrefix(string(data), "[h3]:"+itoa(s.port)+",[127.0.0.1]:"+itoa(s.port)+" ssh-ed25519 ") {
		t.Errorf("known_hosts: %q", data)
	}
	if !strings.Contains(e.logText(), "recorded new host key") {
		t.Errorf("log: %q", e.logText())
	}
	// Known now, without AcceptNew.
	dialOK(t, e.dialer(Options{}), "h3")
}

func TestStrictHostKeyCheckingConfig(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("lax", s, "StrictHostKeyChecking no", "UserKnownHostsFile /dev/null") +
		hostBlock("acc", s, "StrictHostKeyChecking accept-new"))
	d := e.dialer(Options{})
	dialOK(t, d, "lax")
	dialOK(t, d, "lax")
	if n := strings.Count(e.logText(), "StrictHostKeyChecking no"); n != 1 {
		t.Errorf("want one notice for StrictHostKeyChecking no, got %d: %q", n, e.logText())
	}
	dialOK(t, d, "acc")
	if data, _ := os.ReadFile(e.knownHostsFile()); !strings.Contains(string(data), "[acc]:") {
		t.Errorf("accept-new from the config did not record: %q", data)
	}
}

// newLenientEnv is a client whose ssh config has three aliases of s, each
// letting an unknown host key in a way of its own with the dialers of
// eachLenient: h3 with --ssh-accept-new (Options.AcceptNew), lax with
// StrictHostKeyChecking no, acc with StrictHostKeyChecking accept-new
// (extra goes to the last two).
func newLenientEnv(t *testing.T, key ed25519.PrivateKey, s *testServer, extra ...string) *testEnv {
	t.Helper()
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("h3", s) + hostBlock("lax", s, append([]string{"StrictHostKeyChecking no"}, extra...)...) +
		hostBlock("acc", s, append([]string{"StrictHostKeyChecking accept-new"}, extra...)...))
	return e
}

// eachLenient calls f for each alias of newLenientEnv with a dialer with
// and one without AcceptNew.
func (e *testEnv) eachLenient(f func(alias string, acceptNew bool, d *Dialer)) {
	for _, alias := range []string{"h3", "lax", "acc"} {
		for _, acceptNew := range []bool{false, true} {
			f(alias, acceptNew, e.dialer(Options{AcceptNew: acceptNew}))
		}
	}
}

// A changed host key is refused, whatever lets an unknown one in:
// --ssh-accept-new, StrictHostKeyChecking accept-new, and
// StrictHostKeyChecking no (where ssh(1) would connect with a warning).
func TestChangedHostKey(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newLenientEnv(t, key, s)
	e.addKnown([]string{"other.example:22"}, newSigner(t).PublicKey())
	old := newSigner(t).PublicKey()
	e.addKnown([]string{addr("127.0.0.1", s.port)}, old)
	e.eachLenient(func(alias string, acceptNew bool, d *Dialer) {
		msg := dialErr(t, d, alias, HostKeyChanged).Error()
		for _, want := range []string{alias + ": host key changed", "~/.ssh/known_hosts:2", ssh.FingerprintSHA256(old), ssh.FingerprintSHA256(s.hostKey()), "ssh-keygen -R"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s, AcceptNew=%v: error %q lacks %q", alias, acceptNew, msg, want)
			}
		}
	})
	if data, _ := os.ReadFile(e.knownHostsFile()); strings.Count(string(data), "\n") != 2 {
		t.Errorf("known_hosts changed: %q", data)
	}
}

// A host key marked @revoked is refused, also when known_hosts lists it
// for the host as well, and whatever lets an unknown key in; nothing is
// recorded.
func TestRevokedHostKey(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newLenientEnv(t, key, s)
	e.appendKnown("@revoked * " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.hostKey()))))
	check := func(alias string, acceptNew bool, d *Dialer) {
		msg := dialErr(t, d, alias, HostKeyChanged).Error()
		if !strings.Contains(msg, "marked @revoked at ~/.ssh/known_hosts:1") || !strings.Contains(msg, ssh.FingerprintSHA256(s.hostKey())) {
			t.Errorf("%s, AcceptNew=%v: %q", alias, acceptNew, msg)
		}
	}
	e.eachLenient(check)
	if data, _ := os.ReadFile(e.knownHostsFile()); strings.Count(string(data), "\n") != 1 {
		t.Errorf("known_hosts changed: %q", data)
	}
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	e.eachLenient(check)
}

// A host certificate is taken on the word of a @cert-authority line for
// the host: signed by that CA for the host's name, it is accepted; signed
// by another CA, or by the trusted one for another host, it is refused,
// whatever lets an unknown key in, and nothing is recorded.
func TestCertAuthorityHostKey(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	ca, otherCA := newSigner(t), newSigner(t)
	hostCert := func(signer ssh.Signer, principals ...string) ssh.Signer {
		t.Helper()
		host := newSigner(t)
		cert := &ssh.Certificate{Key: host.PublicKey(), Serial: 1, CertType: ssh.HostCert, KeyId: "test host",
			ValidPrincipals: principals, ValidBefore: ssh.CertTimeInfinity}
		if err := cert.SignCert(rand.Reader, signer); err != nil {
			t.Fatal(err)
		}
		cs, err := ssh.NewCertSigner(cert, host)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	for _, tt := range []struct {
		name string
		cert ssh.Signer
		ok   bool
	}{
		{"trusted", hostCert(ca, "h3", "127.0.0.1"), true},
		{"other CA", hostCert(otherCA, "h3", "127.0.0.1"), false},
		{"other host", hostCert(ca, "h9.example"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, withHostKeys(tt.cert))
			e := newLenientEnv(t, key, s, "HostKeyAlias h3")
			e.appendKnown("@cert-authority " + knownhosts.Normalize(addr("h3", s.port)) + "," + knownhosts.Normalize(addr("127.0.0.1", s.port)) +
				" " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey()))))
			e.eachLenient(func(alias string, _ bool, d *Dialer) {
				if tt.ok {
					dialOK(t, d, alias)
				} else {
					dialErr(t, d, alias, Other)
				}
			})
			if data, _ := os.ReadFile(e.knownHostsFile()); strings.Count(string(data), "\n") != 1 {
				t.Errorf("known_hosts changed: %q", data)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	e := newEnv(t)
	e.writeConfig("Host dead\n  HostName 127.0.0.1\n  Port " + itoa(port) + "\n")
	start := time.Now()
	he := dialErr(t, e.dialer(Options{}), "dead", Refused)
	if time.Since(start) > 2*time.Second {
		t.Errorf("refused took %v", time.Since(start))
	}
	if !strings.Contains(he.Error(), "dead: connection refused") {
		t.Errorf("error %q", he)
	}
}

func TestProxyJump(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	auth := []ssh.PublicKey{pubOf(t, key)}
	j1, j2, target := newTestServer(t, auth), newTestServer(t, auth), newTestServer(t, auth)
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("target", target, "ProxyJump j1") +
		hostBlock("chained", target, "ProxyJump j1,j2") +
		hostBlock("unknown", target, "ProxyJump j1", "HostKeyAlias never-seen") +
		hostBlock("nobody", j2, "ProxyJump jx") +
		hostBlock("j1", j1) + hostBlock("j2", j2) + hostBlock("jx", j1, "HostKeyAlias jx-alias"))
	e.addKnown([]string{addr("127.0.0.1", j1.port)}, j1.hostKey())
	e.addKnown([]string{addr("127.0.0.1", j2.port)}, j2.hostKey())
	e.addKnown([]string{addr("127.0.0.1", target.port)}, target.hostKey())
	d := e.dialer(Options{})

	c := dialOK(t, d, "target")
	if got := run(t, c, "echo via"); got != "via\n" {
		t.Errorf("exec through jump: %q", got)
	}
	if j1.directTCPIP.Load() != 1 {
		t.Errorf("j1 opened %d direct-tcpip channels, want 1", j1.directTCPIP.Load())
	}

	// A chain: j1, then j2 through j1, then the target through j2.
	c2 := dialOK(t, d, "chained")
	run(t, c2, "true")
	if j1.directTCPIP.Load() != 2 || j2.directTCPIP.Load() != 1 {
		t.Errorf("direct-tcpip: j1 %d (want 2), j2 %d (want 1)", j1.directTCPIP.Load(), j2.directTCPIP.Load())
	}

	// The jump connections are shared, and closed with the last user.
	d.jumpMu.Lock()
	if len(d.jumps) != 2 {
		t.Errorf("%d jump connections open, want 2 (j1, j2 via j1)", len(d.jumps))
	}
	d.jumpMu.Unlock()
	c3 := dialOK(t, d, "target")
	if j1.directTCPIP.Load() != 3 || j1.execCount() != 0 {
		t.Errorf("j1: %d direct-tcpip", j1.directTCPIP.Load())
	}
	c.Close()
	c2.Close()
	c3.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.jumpMu.Lock()
		n := len(d.jumps)
		d.jumpMu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jump connections still open after their users closed", n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The target's own host key is checked.
	he := dialErr(t, d, "unknown", HostKeyUnknown)
	if !strings.Contains(he.Error(), ssh.FingerprintSHA256(target.hostKey())) {
		t.Errorf("error %q", he)
	}
	// And so is the jump host's: the error names it.
	he = dialErr(t, d, "nobody", HostKeyUnknown)
	if !strings.Contains(he.Error(), "via jump host jx") {
		t.Errorf("error %q", he)
	}
}

func TestProxyJumpRefused(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	j := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig("Host dead\n  HostName 127.0.0.1\n  Port " + itoa(port) + "\n  ProxyJump j\n" + hostBlock("j", j))
	e.addKnown([]string{addr("127.0.0.1", j.port)}, j.hostKey())
	he := dialErr(t, e.dialer(Options{}), "dead", Refused)
	if !strings.Contains(he.Error(), "from jump host j") {
		t.Errorf("error %q", he)
	}
}

func TestRetryThrottled(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, withDropFirst(2))
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("h3", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	dialOK(t, e.dialer(Options{}), "h3")
	logs := e.logText()
	for _, want := range []string{"h3: sshd closed the connection during the handshake (MaxStartups?); retry 1 in ", "retry 2 in "} {
		if !strings.Contains(logs, want) {
			t.Errorf("log %q lacks %q", logs, want)
		}
	}
	if strings.Contains(logs, "retry 3") {
		t.Errorf("too many retries: %q", logs)
	}

	// Past the retries: Throttled, with the hint.
	s2 := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, withDropFirst(100))
	e.writeConfig(hostBlock("h4", s2))
	he := dialErr(t, e.dialer(Options{Retries: 2}), "h4", Throttled)
	if !strings.Contains(he.Error(), "MaxStartups") || !strings.Contains(he.Error(), "--ssh-parallel") {
		t.Errorf("error %q", he)
	}
}

func TestMaxHandshakes(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, withHandshakeDelay(60*time.Millisecond))
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("h*", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	d := e.dialer(Options{MaxHandshakes: 3})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var clients []*ssh.Client
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.Dial(context.Background(), "h"+itoa(i), "", 0)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, c := range clients {
		c.Close()
	}
	// Connections stay open: only handshakes are bounded.
	if len(clients) != 12 {
		t.Fatalf("%d clients", len(clients))
	}
	if m := s.maxHandshake.Load(); m > 3 || m < 2 {
		t.Errorf("max concurrent handshakes %d, want 2..3", m)
	}
}

func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	// A listener that accepts and never answers: the handshake times out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	e := newEnv(t)
	e.writeConfig("Host mute\n  HostName 127.0.0.1\n  Port " + itoa(ln.Addr().(*net.TCPAddr).Port) + "\n")
	start := time.Now()
	he := dialErr(t, e.dialer(Options{ConnectTimeout: 200 * time.Millisecond}), "mute", Unreachable)
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v", el)
	}
	if !strings.Contains(he.Error(), "within 200ms") {
		t.Errorf("error %q", he)
	}

	// Cancelling the context is not a timeout.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = e.dialer(Options{}).Dial(ctx, "mute", "", 0)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled dial: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestIPv6(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, withListen("[::1]:0"))
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig("Host v6\n  HostName ::1\n  Port " + itoa(s.port) + "\n")
	d := e.dialer(Options{AcceptNew: true})
	dialOK(t, d, "v6")
	// A literal in the host list, with the port from the host list.
	c, err := e.dialer(Options{}).Dial(context.Background(), "[::1]", "", s.port)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if data, _ := os.ReadFile(e.knownHostsFile()); !strings.HasPrefix(string(data), "[v6]:"+itoa(s.port)+",[::1]:"+itoa(s.port)+" ") {
		t.Errorf("known_hosts: %q", data)
	}
}
