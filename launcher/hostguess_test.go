package launcher

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gorun/gorun/sshclient"
)

// A host whose name does not resolve gets the closest name that
// /etc/hosts, the ssh config or known_hosts holds.
func TestWithHostGuess(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"hosts":       "127.0.0.1 localhost\n10.0.0.2 h2 h2.lan # test host\nbad line\n",
		"config":      "Host gpu-node-1 *.example\n  HostName 10.0.0.9\n",
		"known_hosts": "[h3]:2222,10.0.0.3 ssh-ed25519 AAAA\n|1|hashed= ssh-ed25519 AAAA\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := knownHostNames([]string{filepath.Join(dir, "hosts"), filepath.Join(dir, "none"), filepath.Join(dir, "config"), filepath.Join(dir, "known_hosts")})
	if want := []string{"localhost", "h2", "h2.lan", "gpu-node-1", "h3", "10.0.0.3"}; !reflect.DeepEqual(all, want) {
		t.Errorf("knownHostNames = %q, want %q", all, want)
	}
	old := knownHostFiles
	knownHostFiles = func() []string {
		return []string{filepath.Join(dir, "hosts"), filepath.Join(dir, "config"), filepath.Join(dir, "known_hosts")}
	}
	defer func() { knownHostFiles = old }()
	notFound := &sshclient.HostError{Host: "hh2", Kind: sshclient.Unreachable, Err: &net.DNSError{Err: "no such host", Name: "hh2", IsNotFound: true}}
	err := withHostGuess(notFound, "hh2")
	if !errors.Is(err, notFound) || err.Error() != notFound.Error()+" (did you mean h2?)" {
		t.Errorf("withHostGuess: %v", err)
	}
	if err := withHostGuess(notFound, "zzzzzz"); err != notFound {
		t.Errorf("a name close to none: %v", err)
	}
	refused := errors.New("connection refused")
	if err := withHostGuess(refused, "hh2"); err != refused {
		t.Errorf("another failure: %v", err)
	}
}
