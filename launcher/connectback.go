package launcher

// The connect-back: agents that srun starts dial the head over TCP, since
// srun gives them no stdio of their own. The channel is TLS 1.3, both
// sides prove themselves, and the proofs are bound to the TLS session:
//
//   - the head presents a certificate it made for this job (a fresh
//     ECDSA P-256 key); the agent knows its SHA-256 fingerprint from
//     srun's environment (HeadCertEnv) and refuses any other, so an agent
//     that reaches something other than its head (another user listening
//     on a port of the node) starts nothing;
//   - the agent proves itself with the job's agent key (AgentKeyEnv):
//     HMAC-SHA256(key, label, node, EKM), EKM being 32 bytes of the TLS
//     session's exported keying material (RFC 8446 7.5). A proof is worth
//     nothing on another connection, so neither relaying nor reflecting
//     one gets a stranger accepted as a node;
//   - after the handshake, TLS keeps the control frames (the job secret,
//     argv, -x values) private and tamper-evident.
//
// Both values travel in srun's environment, never on a command line that
// every user of a node can read, and the agent removes them from its own
// environment before any rank starts.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/gorun/gorun/internal/selfcert"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// The variables srun's environment carries to the agents it starts.
const (
	// AgentKeyEnv is the key an agent proves itself with (hex).
	AgentKeyEnv = "GORUN_AGENT_KEY"
	// HeadCertEnv is the SHA-256 fingerprint of the head's certificate
	// (hex), which the agent accepts and no other.
	HeadCertEnv = "GORUN_HEAD_CERT"
)

// The connect-back's labels: the TLS exporter's, and the agent's line.
const (
	ekmLabel    = "EXPORTER-gorun-agent-proof"
	agentPrefix = "GORUN-AGENT "
)

// Timeouts of the connect-back handshake: the head gives each connection
// this long to prove itself; the agent waits longer, since it may queue
// behind others in the head's backlog.
const (
	headHandshakeTimeout  = 5 * time.Second
	agentHandshakeTimeout = 40 * time.Second
)

// headIdentity is the head's certificate for one job.
type headIdentity struct {
	cert        tls.Certificate
	fingerprint string // hex SHA-256 of the certificate (DER)
}

// newHeadIdentity makes a self-signed certificate with a fresh key. Its
// name and validity matter to nobody: the agents pin its fingerprint.
func newHeadIdentity() (*headIdentity, error) {
	cert, fp, err := selfcert.New("gorun head")
	if err != nil {
		return nil, err
	}
	return &headIdentity{cert: cert, fingerprint: fp}, nil
}

// agentProof is what an agent sends: HMAC-SHA256 over a label, its node
// name and the TLS session's exported keying material.
func agentProof(key []byte, node string, ekm []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("gorun agent v2\x00" + node + "\x00"))
	m.Write(ekm)
	return m.Sum(nil)
}

// errNotAgent, errWrongKey: why the head refused a connection.
var (
	errNotAgent = errors.New("not a gorun agent")
	errWrongKey = errors.New("wrong key")
)

// acceptAgent runs the head's side of the connect-back on c: TLS with id's
// certificate, then the agent's proof. It returns the node the agent
// proved to be and the TLS connection to speak the control protocol on.
func acceptAgent(c net.Conn, id *headIdentity, key []byte) (string, *tls.Conn, error) {
	c.SetDeadline(time.Now().Add(headHandshakeTimeout))
	t := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{id.cert}, MinVersion: tls.VersionTLS13})
	if err := t.Handshake(); err != nil {
		return "", nil, fmt.Errorf("%w (TLS: %v)", errNotAgent, err)
	}
	line, err := readLine(t, 512)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", errNotAgent, err)
	}
	rest, ok := strings.CutPrefix(line, agentPrefix)
	node, macHex, ok2 := strings.Cut(rest, " ")
	mac, err := hex.DecodeString(macHex)
	if !ok || !ok2 || node == "" || err != nil {
		return "", nil, errNotAgent
	}
	cs := t.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return "", nil, err
	}
	if !hmac.Equal(mac, agentProof(key, node, ekm)) {
		return "", nil, errWrongKey
	}
	c.SetDeadline(time.Time{})
	return node, t, nil
}

// readLine reads one line of at most max bytes, byte by byte, so that
// nothing after it is consumed.
func readLine(r io.Reader, max int) (string, error) {
	var b []byte
	var one [1]byte
	for len(b) < max {
		if _, err := io.ReadFull(r, one[:]); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
	return "", errors.New("line too long")
}

// ErrNotHead is wrapped by DialHead's error for an address where something
// other than this job's head answered.
var ErrNotHead = errors.New("not this job's head")

// DialHead is an srun-started agent's side: it connects to the first of
// addrs (comma-separated host:port) that answers as this job's head (TLS
// with the certificate whose fingerprint HeadCertEnv gives), proves itself
// as node with the key from AgentKeyEnv, and returns the connection for
// the control protocol. It removes both variables from the environment
// first, so that no rank inherits them. An address where anything else
// answers is refused, named in the error, and nothing is sent to it.
func DialHead(addrs, node string) (net.Conn, error) {
	keyHex, pin := os.Getenv(AgentKeyEnv), os.Getenv(HeadCertEnv)
	os.Unsetenv(AgentKeyEnv)
	os.Unsetenv(HeadCertEnv)
	key, err := hex.DecodeString(keyHex)
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("no agent key in $%s", AgentKeyEnv)
	}
	if _, err := hex.DecodeString(pin); err != nil || len(pin) != 64 {
		return nil, fmt.Errorf("no head certificate fingerprint in $%s", HeadCertEnv)
	}
	var errs []error
	for _, a := range strings.Split(addrs, ",") {
		c, err := dialHead(a, key, pin, node)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			if errors.Is(err, ErrNotHead) {
				break // someone else holds the head's address: do not try on
			}
			continue
		}
		return c, nil
	}
	return nil, fmt.Errorf("reach the head: %w", errors.Join(errs...))
}

// dialHead connects to addr and runs the agent's side of the connect-back.
func dialHead(addr string, key []byte, pin, node string) (*tls.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentHandshakeTimeout)
	defer cancel()
	t := tls.Client(c, &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The pin below is the whole verification: no CA, no name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: it showed no certificate", ErrNotHead)
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if got := hex.EncodeToString(sum[:]); !hmac.Equal([]byte(got), []byte(pin)) {
				return fmt.Errorf("%w: its certificate (sha256 %s…) is not the one in $%s", ErrNotHead, got[:16], HeadCertEnv)
			}
			return nil
		},
	})
	if err := t.HandshakeContext(ctx); err != nil {
		c.Close()
		var ne net.Error
		var alert tls.AlertError
		var rec tls.RecordHeaderError
		switch {
		case errors.Is(err, ErrNotHead):
		case errors.As(err, &alert) || errors.As(err, &rec):
			err = fmt.Errorf("%w: it does not speak gorun's TLS (%v)", ErrNotHead, err)
		case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF):
			err = fmt.Errorf("TLS handshake: %w", err)
		default:
			err = fmt.Errorf("%w: TLS handshake: %v", ErrNotHead, err)
		}
		return nil, err
	}
	cs := t.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err == nil {
		t.SetWriteDeadline(time.Now().Add(agentHandshakeTimeout))
		_, err = io.WriteString(t, agentPrefix+node+" "+hex.EncodeToString(agentProof(key, node, ekm))+"\n")
		t.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}
