package sshclient

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// khEntry is a cached known_hosts database.
type khEntry struct {
	gen int
	cb  ssh.HostKeyCallback // nil when none of the files exists
	err error
}

// recordMu serializes appends to known_hosts files within this process;
// flock serializes them across processes.
var recordMu sync.Mutex

// loadKnownHosts reads the known_hosts files that exist.
func loadKnownHosts(files []string) (ssh.HostKeyCallback, error) {
	var exist []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			exist = append(exist, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if len(exist) == 0 {
		return nil, nil
	}
	return knownhosts.New(exist...)
}

func (d *Dialer) knownHosts(files []string) (ssh.HostKeyCallback, error) {
	key := strings.Join(files, "\x00")
	d.khMu.Lock()
	defer d.khMu.Unlock()
	if e, ok := d.khCache[key]; ok && e.gen == d.khGen {
		return e.cb, e.err
	}
	cb, err := loadKnownHosts(files)
	d.khCache[key] = &khEntry{gen: d.khGen, cb: cb, err: err}
	return cb, err
}

func (d *Dialer) dummyKey() ssh.PublicKey {
	d.dummyMu.Lock()
	defer d.dummyMu.Unlock()
	if d.dummy == nil {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		d.dummy, _ = ssh.NewPublicKey(pub)
	}
	return d.dummy
}

// hostKeyCheck verifies the host key of one handshake.
type hostKeyCheck struct {
	d     *Dialer
	t     Target
	addrs []string   // the names the key is looked up under, host:port
	err   *HostError // why the key was refused
}

func (d *Dialer) newHostKeyCheck(t Target) *hostKeyCheck {
	hk := &hostKeyCheck{d: d, t: t}
	port := strconv.Itoa(t.Port)
	if t.HostKeyAlias != "" {
		hk.addrs = []string{net.JoinHostPort(t.HostKeyAlias, port)}
	} else {
		hk.addrs = appendUnique([]string{net.JoinHostPort(t.Alias, port)}, net.JoinHostPort(t.HostName, port))
	}
	return hk
}

// algorithms returns the host key algorithms to offer: those of the keys
// known_hosts has for the host first (so that the server presents a key we
// can check, as OpenSSH does), then the other supported ones; nil (the
// default) when the host is not known.
func (hk *hostKeyCheck) algorithms() []string {
	cb, err := hk.d.knownHosts(hk.t.KnownHosts)
	if err != nil || cb == nil {
		return nil
	}
	supported := ssh.SupportedAlgorithms().HostKeys
	isSupported := func(a string) bool {
		for _, s := range supported {
			if s == a {
				return true
			}
		}
		return false
	}
	var prefer []string
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: hk.t.Port}
	for _, a := range hk.addrs {
		var ke *knownhosts.KeyError
		if err := cb(a, remote, hk.d.dummyKey()); !errors.As(err, &ke) {
			continue
		}
		for _, w := range ke.Want {
			algs := []string{w.Key.Type()}
			if w.Key.Type() == ssh.KeyAlgoRSA {
				algs = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
			}
			for _, alg := range algs {
				if isSupported(alg) {
					prefer = appendUnique(prefer, alg)
				}
			}
		}
	}
	if len(prefer) == 0 {
		return nil
	}
	for _, s := range supported {
		prefer = appendUnique(prefer, s)
	}
	return prefer
}

type khVerdict int

const (
	khUnknown khVerdict = iota
	khOK
	khChanged
	khRevoked
)

// verdict checks key under every name of the host: any match is enough; else
// any other key recorded for a name means the key changed.
func (hk *hostKeyCheck) verdict(cb ssh.HostKeyCallback, remote net.Addr, key ssh.PublicKey) (khVerdict, []knownhosts.KnownKey, error) {
	if cb == nil {
		return khUnknown, nil, nil
	}
	var want []knownhosts.KnownKey
	for _, a := range hk.addrs {
		err := cb(a, remote, key)
		if err == nil {
			return khOK, nil, nil
		}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &re):
			return khRevoked, []knownhosts.KnownKey{re.Revoked}, nil
		case errors.As(err, &ke):
			want = append(want, ke.Want...)
		default:
			return khUnknown, nil, err
		}
	}
	if len(want) > 0 {
		return khChanged, want, nil
	}
	return khUnknown, nil, nil
}

func (hk *hostKeyCheck) check(_ string, remote net.Addr, key ssh.PublicKey) error {
	err := hk.doCheck(remote, key)
	if err != nil {
		var he *HostError
		if errors.As(err, &he) {
			hk.err = he
		} else {
			hk.err = hostErr(hk.t.Alias, Other, err, "")
		}
	}
	return err
}

func (hk *hostKeyCheck) doCheck(remote net.Addr, key ssh.PublicKey) error {
	d, t := hk.d, hk.t
	cb, err := d.knownHosts(t.KnownHosts)
	if err != nil {
		return hostErr(t.Alias, Other, fmt.Errorf("reading known_hosts: %w", err), "fix or remove the bad line")
	}
	v, want, err := hk.verdict(cb, remote, key)
	if err != nil {
		return hostErr(t.Alias, Other, err, "")
	}
	switch v {
	case khOK:
		return nil
	case khChanged, khRevoked:
		// Refused even with StrictHostKeyChecking no, where ssh(1) would
		// connect with a warning: gorun never accepts a changed key.
		return hk.changed(v, key, want)
	}
	switch t.StrictHostKeyChecking {
	case "no":
		d.logOnce("strict-no", "%s: the ssh config sets StrictHostKeyChecking no: accepting its unknown host key %s without checking or recording it (and likewise for any other such host)", t.Alias, fingerprint(key))
		return nil
	case "accept-new":
		return hk.record(remote, key)
	}
	return hk.unknown(key)
}

func (hk *hostKeyCheck) unknown(key ssh.PublicKey) *HostError {
	d, t := hk.d, hk.t
	files := make([]string, len(t.KnownHosts))
	for i, f := range t.KnownHosts {
		files[i] = d.tildePath(f)
	}
	where := "no known_hosts file is configured"
	if len(files) > 0 {
		where = "it is not in " + strings.Join(files, " or ")
	}
	scan := "ssh-keyscan -H "
	if t.Port != 22 {
		scan += "-p " + strconv.Itoa(t.Port) + " "
	}
	scan += t.HostName
	dest := "~/.ssh/known_hosts"
	if len(files) > 0 {
		dest = files[0]
	}
	hint := fmt.Sprintf("to accept it: %s >> %s (after checking the fingerprint), or run gorun with --ssh-accept-new", scan, dest)
	if t.HostKeyAlias != "" {
		// ssh-keyscan would record it under the address, not the alias.
		hint = fmt.Sprintf("to accept it (after checking the fingerprint): echo %s >> %s, or run gorun with --ssh-accept-new",
			shQuote(knownhosts.Line(hk.addrs, key)), dest)
	}
	return hostErr(t.Alias, HostKeyUnknown,
		fmt.Errorf("%s presents host key %s; %s", addrWords(t.HostName, t.Port), fingerprint(key), where), hint)
}

func (hk *hostKeyCheck) changed(v khVerdict, key ssh.PublicKey, want []knownhosts.KnownKey) *HostError {
	d, t := hk.d, hk.t
	var olds []string
	for _, w := range want {
		olds = appendUnique(olds, fmt.Sprintf("%s:%d (%s)", d.tildePath(w.Filename), w.Line, fingerprint(w.Key)))
	}
	if v == khRevoked {
		return hostErr(t.Alias, HostKeyChanged,
			fmt.Errorf("%s presents host key %s, which is marked @revoked at %s", addrWords(t.HostName, t.Port), fingerprint(key), strings.Join(olds, ", ")),
			"refusing to connect")
	}
	var rm []string
	for _, a := range hk.addrs {
		rm = append(rm, "ssh-keygen -R '"+knownhosts.Normalize(a)+"'")
	}
	return hostErr(t.Alias, HostKeyChanged,
		fmt.Errorf("%s now presents host key %s, but known_hosts has %s for it: someone may be intercepting the connection (man-in-the-middle), or the host was reinstalled",
			addrWords(t.HostName, t.Port), fingerprint(key), strings.Join(olds, ", ")),
		"if the change is expected, remove the old key ("+strings.Join(rm, "; ")+") and accept the new one; gorun never accepts a changed key")
}

// record appends key to the first known_hosts file (accept-new), under a
// lock, unless the host became known meanwhile.
func (hk *hostKeyCheck) record(remote net.Addr, key ssh.PublicKey) error {
	d, t := hk.d, hk.t
	if len(t.KnownHosts) == 0 {
		return hk.unknown(key)
	}
	file := t.KnownHosts[0]
	fail := func(err error) error {
		return hostErr(t.Alias, HostKeyUnknown, fmt.Errorf("recording host key %s in %s: %w", fingerprint(key), d.tildePath(file), err), "")
	}
	recordMu.Lock()
	defer recordMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fail(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)

	// Another dial (here or in another gorun) may have recorded it.
	cb, err := loadKnownHosts(t.KnownHosts)
	if err != nil {
		return hostErr(t.Alias, Other, fmt.Errorf("reading known_hosts: %w", err), "")
	}
	switch v, want, err := hk.verdict(cb, remote, key); {
	case err != nil:
		return hostErr(t.Alias, Other, err, "")
	case v == khOK:
		d.invalidateKnownHosts()
		return nil
	case v != khUnknown:
		return hk.changed(v, key, want)
	}

	line := knownhosts.Line(hk.addrs, key) + "\n"
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], st.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	d.invalidateKnownHosts()
	names := make([]string, len(hk.addrs))
	for i, a := range hk.addrs {
		names[i] = knownhosts.Normalize(a)
	}
	d.logf("%s: recorded new host key %s for %s in %s (accept-new)", t.Alias, fingerprint(key), strings.Join(names, ","), d.tildePath(file))
	return nil
}

func (d *Dialer) invalidateKnownHosts() {
	d.khMu.Lock()
	d.khGen++
	d.khMu.Unlock()
}
