package sshclient

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// maxIdentities is how many keys are offered to a server: sshd's MaxAuthTries
// defaults to 6, and every key it rejects counts.
const maxIdentities = 6

// keyFile is a parsed private key file.
type keyFile struct {
	signer    ssh.Signer    // nil when encrypted or unusable
	pub       ssh.PublicKey // known even when encrypted, if the file or FILE.pub says
	encrypted bool
	missing   bool
	err       error
}

func (d *Dialer) loadKey(path string) *keyFile {
	d.keysMu.Lock()
	defer d.keysMu.Unlock()
	if k, ok := d.keys[path]; ok {
		return k
	}
	k := &keyFile{}
	d.keys[path] = k
	data, err := os.ReadFile(path)
	if err != nil {
		k.missing = errors.Is(err, fs.ErrNotExist)
		k.err = err
		return k
	}
	signer, err := ssh.ParsePrivateKey(data)
	var pm *ssh.PassphraseMissingError
	switch {
	case err == nil:
		k.signer, k.pub = signer, signer.PublicKey()
	case errors.As(err, &pm):
		k.encrypted, k.pub = true, pm.PublicKey
		k.err = err
	default:
		k.err = err
	}
	if k.pub == nil {
		if b, err := os.ReadFile(path + ".pub"); err == nil {
			if pub, _, _, _, err := ssh.ParseAuthorizedKey(b); err == nil {
				k.pub = pub
			}
		}
	}
	return k
}

// auth collects the identities of one handshake, in OpenSSH's order.
type auth struct {
	d       *Dialer
	t       Target
	started atomic.Bool // the server asked for authentication

	mu        sync.Mutex
	agentConn net.Conn
	tried     []string // identities offered, in words
	skipped   []string // identities not offered, and why
	noAgent   string   // why the agent was not used, if it was not
}

func (d *Dialer) newAuth(t Target) *auth { return &auth{d: d, t: t} }

func (a *auth) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agentConn != nil {
		a.agentConn.Close()
		a.agentConn = nil
	}
}

func fingerprint(k ssh.PublicKey) string {
	return strings.TrimPrefix(k.Type(), "ssh-") + " " + ssh.FingerprintSHA256(k)
}

// signers is the ssh.PublicKeysCallback: -i and IdentityFile keys, the
// agent's keys (with IdentitiesOnly, only those matching the files), then the
// default ~/.ssh/id_* when no file was named; at most maxIdentities.
func (a *auth) signers() ([]ssh.Signer, error) {
	a.started.Store(true)
	a.mu.Lock()
	defer a.mu.Unlock()
	d, t := a.d, a.t
	if a.agentConn != nil { // called again (partial success): start over
		a.agentConn.Close()
		a.agentConn = nil
	}
	a.tried, a.skipped, a.noAgent = nil, nil, ""

	var agentSigners []ssh.Signer
	if t.IdentityAgent != "" {
		c, err := net.Dial("unix", t.IdentityAgent)
		if err != nil {
			a.noAgent = fmt.Sprintf("agent at %s: %v", t.IdentityAgent, err)
			d.logOnce("agent:"+t.IdentityAgent, "ssh: cannot use the ssh-agent at %s: %v", t.IdentityAgent, err)
		} else {
			a.agentConn = c
			// An agent that hangs must not outlast the handshake.
			_ = c.SetDeadline(time.Now().Add(t.ConnectTimeout))
			agentSigners, err = agent.NewClient(c).Signers()
			if err != nil {
				a.noAgent = fmt.Sprintf("agent at %s: %v", t.IdentityAgent, err)
				agentSigners = nil
			}
		}
	} else {
		a.noAgent = "no ssh-agent (SSH_AUTH_SOCK unset, or IdentityAgent none)"
	}
	agentFor := func(pub ssh.PublicKey) ssh.Signer {
		if pub == nil {
			return nil
		}
		for _, s := range agentSigners {
			if bytes.Equal(s.PublicKey().Marshal(), pub.Marshal()) {
				return s
			}
		}
		return nil
	}

	var out []ssh.Signer
	seen := map[string]bool{}
	add := func(s ssh.Signer, words string) {
		k := string(s.PublicKey().Marshal())
		if seen[k] {
			return
		}
		seen[k] = true
		if len(out) >= maxIdentities {
			a.skipped = append(a.skipped, words+" (over the limit of "+fmt.Sprint(maxIdentities)+" keys offered)")
			return
		}
		out = append(out, s)
		a.tried = append(a.tried, words)
	}
	addFile := func(path string, explicit bool) {
		k := d.loadKey(path)
		name := d.tildePath(path)
		switch {
		case k.signer != nil:
			add(k.signer, name+" ("+fingerprint(k.pub)+")")
		case agentFor(k.pub) != nil:
			add(agentFor(k.pub), name+" via the agent ("+fingerprint(k.pub)+")")
		case k.missing:
			if explicit {
				a.skipped = append(a.skipped, name+" (no such file)")
				d.logOnce("missing:"+path, "ssh: identity file %s: no such file", name)
			}
		case k.encrypted:
			a.skipped = append(a.skipped, name+" (passphrase-protected and not in the agent)")
			d.logOnce("encrypted:"+path, "ssh: skipping identity %s: it is passphrase-protected and not in the ssh-agent (gorun cannot prompt; ssh-add it)", name)
		default:
			a.skipped = append(a.skipped, name+" ("+k.err.Error()+")")
			d.logOnce("bad:"+path, "ssh: skipping identity %s: %v", name, k.err)
		}
	}

	for _, f := range t.IdentityFiles {
		addFile(f, true)
	}
	if !t.IdentitiesOnly {
		for _, s := range agentSigners {
			words := "agent key (" + fingerprint(s.PublicKey()) + ")"
			if ak, ok := s.PublicKey().(*agent.Key); ok && ak.Comment != "" {
				words = "agent key " + ak.Comment + " (" + fingerprint(s.PublicKey()) + ")"
			}
			add(s, words)
		}
	}
	if len(t.IdentityFiles) == 0 {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			addFile(filepath.Join(d.home, ".ssh", n), false)
		}
	}
	return out, nil
}

// failure is the AuthFailed error, listing what was tried.
func (a *auth) failure() *HostError {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.t
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%s refused public-key authentication", t.User, addrWords(t.HostName, t.Port))
	if len(a.tried) == 0 {
		b.WriteString("; no identity to offer")
	} else {
		b.WriteString("; tried: " + strings.Join(a.tried, ", "))
	}
	if len(a.skipped) > 0 {
		b.WriteString("; skipped: " + strings.Join(a.skipped, ", "))
	}
	if a.noAgent != "" && len(a.tried) == 0 {
		b.WriteString("; " + a.noAgent)
	}
	hint := fmt.Sprintf("add one of these public keys to ~%s/.ssh/authorized_keys on %s, or name the right key with -i or IdentityFile", t.User, t.Alias)
	if len(a.tried) == 0 {
		hint = "create a key (ssh-keygen), load it into ssh-agent, or name it with -i or IdentityFile"
	}
	return hostErr(t.Alias, AuthFailed, errors.New(b.String()), hint)
}
