package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testusers"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/launcher/control"
)

// The test binary doubles as an impostor head, run as the attacking user.
func init() {
	if os.Getenv("GORUN_TEST_IMPOSTOR") != "" {
		os.Exit(impostorHead(os.Getenv("GORUN_TEST_IMPOSTOR")))
	}
}

// Attack 2f of the security review, with the real binary and two users: a
// victim's srun-started agent is given an address on which another user
// of the node listens. The impostor speaks whatever the agent speaks (the
// old nonce-and-MAC handshake, or TLS with a certificate of its own) and,
// if the agent takes it for its head, sends it a Launch that runs `id`.
// The agent must refuse, name the address, and run nothing; before the
// connect-back was authenticated both ways, it ran the impostor's command
// as the victim.
func TestConnectBackImpostorAsAnotherUser(t *testing.T) {
	t.Parallel()
	victim, attacker := testusers.Create(t, "gvic"), testusers.Create(t, "gatk")
	// The test binary, where both users may run it.
	self, _ := os.Executable()
	bin := filepath.Join(sharedDir(t), "gorun.test")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(victim.Home, "pwned")

	imp := attacker.Command(bin)
	imp.Env = append(attacker.Env(), "GORUN_TEST_IMPOSTOR="+marker)
	impOut, err := imp.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var impErr strings.Builder
	imp.Stderr = &impErr
	if err := imp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { imp.Process.Kill(); imp.Wait() })
	lines := bufio.NewScanner(impOut)
	if !lines.Scan() {
		t.Fatalf("the impostor said nothing: %s", impErr.String())
	}
	addr := lines.Text()

	agent := victim.Command(bin, "agent", "--connect", addr)
	agent.Env = append(victim.Env(), "GORUN_TEST_MAIN=1",
		launcher.AgentKeyEnv+"="+strings.Repeat("5a", 32), launcher.HeadCertEnv+"="+strings.Repeat("c3", 32))
	out, err := runWithin(agent, 30*time.Second)
	if err == nil {
		t.Errorf("the agent ran for an impostor and exited 0:\n%s", out)
	}
	if !strings.Contains(out, addr) || !strings.Contains(out, "not this job's head") {
		t.Errorf("the agent's error does not name %s as not its head:\n%s", addr, out)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("the impostor's command ran as the victim: %s", b)
	}
	imp.Process.Kill()
	imp.Wait()
	t.Logf("agent: %s; impostor: %s", strings.TrimSpace(out), strings.TrimSpace(impErr.String()))
}

// runWithin runs cmd to its end, or kills it after limit, and returns its
// combined output.
func runWithin(cmd *exec.Cmd, limit time.Duration) (string, error) {
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return b.String(), err
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		return b.String(), fmt.Errorf("still running after %v", limit)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// impostorHead listens on loopback, prints its address, and plays the
// head to the first connection: with TLS (its own certificate) if the
// agent speaks first, else with the old handshake (a nonce, then whatever
// MAC comes back). If the agent then goes on, it sends a Launch whose
// rank writes `id` into marker. It returns 0 if the agent took it for its
// head.
func impostorHead(marker string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println(ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return 2
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var conn net.Conn = c
	first := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	n, _ := c.Read(first)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if n == 1 {
		// The agent speaks first: TLS. Present a certificate of our own.
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gorun head"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		t := tls.Server(&prefixConn{Conn: c, prefix: first}, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
		if err := t.Handshake(); err != nil {
			fmt.Fprintln(os.Stderr, "impostor: TLS refused:", err)
			return 1
		}
		line, err := readLineSlow(t)
		if err != nil {
			fmt.Fprintln(os.Stderr, "impostor: no proof:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "impostor: got", strings.TrimSpace(line))
		conn = t
	} else {
		// The old handshake: any nonce gets a MAC back.
		io.WriteString(c, "GORUN-HEAD 00112233445566778899aabbccddeeff\n")
		line, err := readLineSlow(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, "impostor: no answer to the nonce:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "impostor: got", strings.TrimSpace(line))
	}
	r, w := control.NewReader(conn), control.NewWriter(conn)
	if _, _, err := r.SkipPreamble(); err != nil {
		fmt.Fprintln(os.Stderr, "impostor: no preamble:", err)
		return 1
	}
	if _, err := control.Handshake(w, r, control.Hello{Version: "impostor"}); err != nil {
		fmt.Fprintln(os.Stderr, "impostor: no hello:", err)
		return 1
	}
	err = w.Send(control.TypeLaunch, control.Launch{JobID: "x", Secret: "0123456789abcdef0123", Argv: []string{"sh", "-c", "id > " + marker},
		Dir: "/", Ranks: []control.RankSpec{{}}, WorldSize: 1, LocalWorldSize: 1, NodeCount: 1, Host: "n", MasterAddr: "127.0.0.1", MasterPort: 1,
		Bind: control.Bind{To: "none"}, PMI: control.PMI{KVSName: "x", PMIx: "off"}})
	if err != nil {
		return 1
	}
	time.Sleep(2 * time.Second)
	fmt.Fprintln(os.Stderr, "impostor: sent a Launch")
	return 0
}

// readLineSlow reads one line (at most 512 bytes) a byte at a time, so
// that what follows it stays unread.
func readLineSlow(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 512 {
		if _, err := io.ReadFull(r, one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			break
		}
		b = append(b, one[0])
	}
	return string(b), nil
}

// prefixConn replays bytes already read before the connection's own.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
