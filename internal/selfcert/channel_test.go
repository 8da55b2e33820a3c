package selfcert

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
)

// handshake runs a TLS handshake over a pipe between a server with
// ServerConfig(cert) and a client with cfg, and returns both ends'
// errors and, where the handshake held, both ends.
func handshake(t *testing.T, cert tls.Certificate, cfg *tls.Config) (client, server *tls.Conn, cerr, serr error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	server, client = tls.Server(a, ServerConfig(cert)), tls.Client(b, cfg)
	done := make(chan error, 1)
	go func() {
		err := server.Handshake()
		if err != nil {
			a.Close() // the client would wait for the server's next flight
		}
		done <- err
	}()
	cerr = client.Handshake()
	if cerr != nil {
		b.Close()
	}
	return client, server, cerr, <-done
}

// A pinned dialer takes the certificate of its pin and no other, and
// says so with wrong's error.
func TestPinnedConfig(t *testing.T) {
	t.Parallel()
	cert, fp, err := New("gorun test")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := New("gorun test")
	if err != nil {
		t.Fatal(err)
	}
	errWrong := errors.New("not the pinned peer")
	var gotFP string
	wrong := func(got string) error { gotFP = got; return errWrong }
	if _, _, cerr, serr := handshake(t, cert, PinnedConfig(fp, wrong)); cerr != nil || serr != nil {
		t.Fatalf("the pinned certificate: client %v, server %v", cerr, serr)
	}
	_, _, cerr, _ := handshake(t, other, PinnedConfig(fp, wrong))
	if !errors.Is(cerr, errWrong) || gotFP != Fingerprint(other.Certificate[0]) {
		t.Errorf("another certificate: %v (wrong told %q)", cerr, gotFP)
	}
	for _, pin := range []string{"", "not hex", fp[:32]} {
		if _, _, cerr, _ := handshake(t, cert, PinnedConfig(pin, wrong)); !errors.Is(cerr, errWrong) {
			t.Errorf("pin %q: %v", pin, cerr)
		}
	}
}

// A proof holds on its session, for its key and its party, and on no
// other session.
func TestProof(t *testing.T) {
	t.Parallel()
	cert, _, err := New("gorun test")
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	ekms := func() (client, server []byte) {
		c, s, cerr, serr := handshake(t, cert, ProofConfig())
		if cerr != nil || serr != nil {
			t.Fatalf("handshake: %v, %v", cerr, serr)
		}
		if client, err = EKM(c.ConnectionState(), "EXPORTER-gorun-test"); err != nil {
			t.Fatal(err)
		}
		if server, err = EKM(s.ConnectionState(), "EXPORTER-gorun-test"); err != nil {
			t.Fatal(err)
		}
		return client, server
	}
	c1, s1 := ekms()
	_, s2 := ekms()
	p := Proof(key, "node\x00", c1)
	if !ProofHolds(p, key, "node\x00", s1) {
		t.Error("a proof does not hold on its own session")
	}
	for name, ok := range map[string]bool{
		"another session": ProofHolds(p, key, "node\x00", s2),
		"another party":   ProofHolds(p, key, "endpoint\x00", s1),
		"another key":     ProofHolds(p, []byte("fedcba9876543210fedcba9876543210"), "node\x00", s1),
		"a cut proof":     ProofHolds(p[:16], key, "node\x00", s1),
	} {
		if ok {
			t.Errorf("a proof holds for %s", name)
		}
	}
}
