package launcher

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/selfcert"
)

func TestParseNNodes(t *testing.T) {
	for _, tt := range []struct {
		in       string
		min, max int
		err      string
	}{
		{"1", 1, 1, ""}, {"4", 4, 4, ""}, {"2:3", 2, 3, ""}, {"3:3", 3, 3, ""},
		{"0", 0, 0, "want 1 <= MIN <= MAX"}, {"3:2", 0, 0, "want 1 <= MIN <= MAX"},
		{"x", 0, 0, "want N or MIN:MAX"}, {"2:", 0, 0, "want N or MIN:MAX"}, {"", 0, 0, "want N or MIN:MAX"},
	} {
		min, max, err := ParseNNodes(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "--nnodes") {
				t.Errorf("ParseNNodes(%q) = %v, want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || min != tt.min || max != tt.max {
			t.Errorf("ParseNNodes(%q) = %d, %d, %v; want %d, %d", tt.in, min, max, err, tt.min, tt.max)
		}
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("  0123456789abcdef0123\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == TokenEnv {
				return v
			}
			return ""
		}
	}
	for _, tt := range []struct {
		file, env, want, err string
	}{
		{file: good, env: "ignored-because-the-file-wins", want: "0123456789abcdef0123"},
		{env: "fedcba9876543210fedc", want: "fedcba9876543210fedc"},
		{file: empty, err: "empty"},
		{file: filepath.Join(dir, "missing"), err: "--rdzv-token-file"},
		{env: "short", err: "at least 16"},
		{err: "needs the token its nodes share"},
	} {
		got, err := ReadToken(tt.file, env(tt.env))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ReadToken(%q, %q) = %q, %v; want an error with %q", tt.file, tt.env, got, err, tt.err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("ReadToken(%q, %q) = %q, %v; want %q", tt.file, tt.env, got, err, tt.want)
		}
	}
}

// shake runs the endpoint's side on one accepted connection and returns
// what acceptNode returned.
func shake(t *testing.T, token []byte) (addr string, res chan error, hellos chan joinHello) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cert, _, err := selfcert.New("test endpoint")
	if err != nil {
		t.Fatal(err)
	}
	res, hellos = make(chan error, 1), make(chan joinHello, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		l, h, err := acceptNode(c, cert, token)
		if err == nil {
			hellos <- h
			l.c.Close()
		}
		res <- err
	}()
	return ln.Addr().String(), res, hellos
}

// Both sides prove the token: the same token joins, and a node with
// another refuses the endpoint before it says anything of itself.
func TestPerNodeHandshake(t *testing.T) {
	token := []byte("0123456789abcdef0123")
	addr, res, hellos := shake(t, token)
	l, err := dialEndpoint(addr, token, joinHello{ID: "job7", NProc: 2, Argv: []string{"train"}})
	if err != nil {
		t.Fatalf("the same token: %v", err)
	}
	l.c.Close()
	if err := <-res; err != nil {
		t.Fatalf("the endpoint refused the right token: %v", err)
	}
	if h := <-hellos; h.ID != "job7" || h.NProc != 2 {
		t.Errorf("hello %+v", h)
	}

	addr, res, hellos = shake(t, token)
	_, err = dialEndpoint(addr, []byte("another-token-0123456"), joinHello{ID: "job7"})
	if !errors.Is(err, ErrRdzvRefused) || !strings.Contains(err.Error(), "did not prove") {
		t.Errorf("another token: the node said %v", err)
	}
	if err := <-res; err == nil || !strings.Contains(err.Error(), "hung up after the endpoint's proof") {
		t.Errorf("another token: the endpoint said %v", err)
	}
	select {
	case h := <-hellos:
		t.Errorf("the endpoint got a hello from a node with another token: %+v", h)
	default:
	}
}

// A node that does not check the endpoint's proof and sends a proof made
// with another token (or none) is refused, and told so.
func TestPerNodeEndpointRefusesBadProof(t *testing.T) {
	token := []byte("0123456789abcdef0123")
	for _, proof := range []string{"", strings.Repeat("ab", 32), rdzvProof([]byte("another-token-0123456"), "node", make([]byte, 32))} {
		addr, res, _ := shake(t, token)
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		l := newLineConn(c)
		if _, err := readLine(l.r, 256); err != nil {
			t.Fatal(err)
		}
		l.send(joinHello{Proof: proof, ID: "x"})
		var m nodeMsg
		if err := l.recv(&m, 5*time.Second); err != nil || !strings.Contains(m.Error, "token is not the job's") {
			t.Errorf("proof %q: answer %+v, %v", proof, m, err)
		}
		if err := <-res; !errors.Is(err, ErrRdzvRefused) {
			t.Errorf("proof %q: the endpoint said %v", proof, err)
		}
		c.Close()
	}
}

// A proof is bound to its TLS session: relayed from one session to
// another (a party in the middle), it is refused.
func TestPerNodeProofIsBoundToSession(t *testing.T) {
	token := []byte("0123456789abcdef0123")
	// A node's genuine proof on session 1, with the node checking the
	// endpoint's: the relay cannot make it without the token.
	addr1, res1, _ := shake(t, token)
	c1, err := tls.Dial("tcp", addr1, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	cs1 := c1.ConnectionState()
	ekm1, _ := cs1.ExportKeyingMaterial(rdzvEKMLabel, nil, 32)
	stolen := rdzvProof(token, "node", ekm1)
	// Played on session 2.
	addr2, res2, _ := shake(t, token)
	c2, err := tls.Dial("tcp", addr2, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	l2 := newLineConn(c2)
	readLine(l2.r, 256)
	l2.send(joinHello{Proof: stolen})
	if err := <-res2; !errors.Is(err, ErrRdzvRefused) {
		t.Errorf("a proof from another session: the endpoint said %v", err)
	}
	c1.Close()
	<-res1
}
