package launcher

// The connect-back: agents that srun starts dial the head over TCP, since
// srun gives them no stdio of their own. The channel is TLS 1.3, both
// sides prove themselves, and the proofs are bound to the TLS session:
//
//   - the head presents a certificate it made for this job (a fresh
//     Ed25519 key); the agent knows its SHA-256 fingerprint from
//     srun's environment (HeadCertEnv) and refuses any other, so an agent
//     that reaches something other than its head (another user listening
//     on a port of the node) starts nothing;
//   - the agent proves itself with the job's agent key (AgentKeyEnv):
//     HMAC-SHA256(key, label, node, EKM), EKM being 32 bytes of the TLS
//     session's exported keying material (RFC 8446 7.5). A proof is worth
//     nothing on another connection, so neither relaying nor reflecting
//     one gets a stranger accepted as a node;
//   - the head answers the proof with a line (headAccepts, headRefuses),
//     so that an agent knows it was taken before it goes on: a flood at
//     the head's door may close a connection at any point until then,
//     and the agent tries again (dialHead) rather than take that for the
//     head's end;
//   - after the handshake, TLS keeps the control frames (the job secret,
//     argv, -x values) private and tamper-evident.
//
// The pin and the proof are internal/selfcert's, as the per-node wire's
// and the job socket's are.
//
// Both values travel in srun's environment, never on a command line that
// every user of a node can read, and the agent removes them from its own
// environment before any rank starts.

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/gorun/gorun/internal/selfcert"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
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

// The connect-back's labels: the TLS exporter's, the agent's line, and
// the head's answers to it.
const (
	ekmLabel    = "EXPORTER-gorun-agent-proof"
	agentPrefix = "GORUN-AGENT "
	headAccepts = "GORUN-HEAD accepted"
	headRefuses = "GORUN-HEAD refused"
)

// Timeouts of the connect-back handshake: the head gives each connection
// this long to prove itself; the agent waits longer, since it may queue
// behind others in the head's backlog, and tries again for as long when
// the head's door closes its connection (dialHead).
const (
	headHandshakeTimeout  = 5 * time.Second
	agentHandshakeTimeout = 40 * time.Second
)

// The agent's pauses between tries, when the head's door closed its
// connection: the first, doubled up to the last, each drawn at random
// between half and all of it so that agents that a flood pushed out
// together do not come back together.
const (
	agentRetryFirst = 20 * time.Millisecond
	agentRetryMax   = time.Second
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

// agentWhat is what an agent's proof (selfcert.Proof, with the job's
// agent key) says it is: the agent of node.
func agentWhat(node string) string { return "gorun agent v2\x00" + node + "\x00" }

// errNotAgent, errWrongKey: why the head refused a connection.
var (
	errNotAgent = errors.New("not a gorun agent")
	errWrongKey = errors.New("wrong key")
)

// acceptAgent runs the head's side of the connect-back on c: TLS with id's
// certificate, then the agent's proof; a wrong one is answered with
// headRefuses. It returns the node the agent proved to be and the TLS
// connection to speak the control protocol on, once welcomeAgent has
// told the agent so.
func acceptAgent(c net.Conn, id *headIdentity, key []byte) (string, *tls.Conn, error) {
	c.SetDeadline(time.Now().Add(headHandshakeTimeout))
	t := tls.Server(c, selfcert.ServerConfig(id.cert))
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
	ekm, err := selfcert.EKM(t.ConnectionState(), ekmLabel)
	if err != nil {
		return "", nil, err
	}
	if !selfcert.ProofHolds(mac, key, agentWhat(node), ekm) {
		io.WriteString(t, headRefuses+"\n")
		return "", nil, errWrongKey
	}
	c.SetDeadline(time.Time{})
	return node, t, nil
}

// welcomeAgent answers an agent's proof that acceptAgent took with
// headAccepts: from then on the agent takes t for its control channel.
func welcomeAgent(t *tls.Conn) error {
	t.SetWriteDeadline(time.Now().Add(headHandshakeTimeout))
	defer t.SetWriteDeadline(time.Time{})
	if _, err := io.WriteString(t, headAccepts+"\n"); err != nil {
		return fmt.Errorf("%w: it left before the head answered its proof: %v", errNotAgent, err)
	}
	return nil
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

// dialHead connects to addr and runs the agent's side of the connect-back,
// trying again while the head's door closes the connection before the
// head took the agent, for agentHandshakeTimeout in all.
func dialHead(addr string, key []byte, pin, node string) (*tls.Conn, error) {
	return dialHeadWithin(addr, key, pin, node, agentHandshakeTimeout)
}

// doorClosed is an attempt that the other side closed (EOF, a reset, a
// broken pipe) before the head's certificate was checked, or that a
// proven head closed before it answered the proof: a flood at the head's
// door pushes out connections so, and the next attempt may pass.
type doorClosed struct{ err error }

func (e doorClosed) Error() string { return e.err.Error() }
func (e doorClosed) Unwrap() error { return e.err }

// closedByPeer reports whether err is the other side closing or
// resetting the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// dialHeadWithin is dialHead, trying for within in all. Only a closed
// connection (doorClosed) is tried again, after a pause (agentRetryFirst,
// doubled up to agentRetryMax, drawn at random); a head that cannot be
// reached, a peer that is not the head (ErrNotHead) and a refused proof
// end it at once. When within is spent, the error says that the door
// kept closing the connection, how often, and the last way it did.
func dialHeadWithin(addr string, key []byte, pin, node string, within time.Duration) (*tls.Conn, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	pause := agentRetryFirst
	var closed doorClosed
	kept := func(closes int) error {
		return fmt.Errorf("the head's door kept closing this connection before the head took it (%d tries in %v; the last: %v): another process may be flooding it",
			closes, time.Since(start).Round(time.Millisecond), closed.err)
	}
	for tries := 1; ; tries++ {
		t, err := dialHeadOnce(ctx, addr, key, pin, node)
		if err == nil {
			return t, nil
		}
		if !errors.As(err, &closed) {
			var ne net.Error
			switch {
			case tries == 1:
			case ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
				return nil, kept(tries - 1) // the bound ran out in the last try
			default:
				err = fmt.Errorf("%w (after the head's door closed %d tries, the last: %v)", err, tries-1, closed.err)
			}
			return nil, err
		}
		wait := pause/2 + rand.N(pause/2+1)
		if deadline, _ := ctx.Deadline(); time.Until(deadline) < wait {
			return nil, kept(tries)
		}
		time.Sleep(wait)
		pause = min(2*pause, agentRetryMax)
	}
}

// dialHeadOnce makes one attempt of dialHead, within ctx.
func dialHeadOnce(ctx context.Context, addr string, key []byte, pin, node string) (*tls.Conn, error) {
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	t := tls.Client(c, selfcert.PinnedConfig(pin, func(got string) error {
		if got == "" {
			return fmt.Errorf("%w: it showed no certificate", ErrNotHead)
		}
		return fmt.Errorf("%w: its certificate (sha256 %s…) is not the one in $%s", ErrNotHead, got[:16], HeadCertEnv)
	}))
	if err := t.HandshakeContext(ctx); err != nil {
		c.Close()
		var ne net.Error
		var alert tls.AlertError
		var rec tls.RecordHeaderError
		switch {
		case errors.Is(err, ErrNotHead):
		case errors.As(err, &alert) || errors.As(err, &rec):
			err = fmt.Errorf("%w: it does not speak gorun's TLS (%v)", ErrNotHead, err)
		case closedByPeer(err):
			// Before the pin check, or just after it: either way
			// nothing was sent that the other side could use.
			err = doorClosed{fmt.Errorf("TLS handshake: %w", err)}
		case errors.As(err, &ne) && ne.Timeout():
			err = fmt.Errorf("TLS handshake: %w", err)
		default:
			err = fmt.Errorf("%w: TLS handshake: %v", ErrNotHead, err)
		}
		return nil, err
	}
	// The head is proven from here on: its answer to the proof says
	// whether it took this agent.
	ekm, err := selfcert.EKM(t.ConnectionState(), ekmLabel)
	if err != nil {
		t.Close()
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	t.SetDeadline(deadline)
	_, err = io.WriteString(t, agentPrefix+node+" "+hex.EncodeToString(selfcert.Proof(key, agentWhat(node), ekm))+"\n")
	var answer string
	if err == nil {
		answer, err = readLine(t, 64)
	}
	switch {
	case err != nil && closedByPeer(err):
		err = doorClosed{fmt.Errorf("after the TLS handshake: %w", err)}
	case err != nil:
		err = fmt.Errorf("no answer from the head to this agent's proof: %w", err)
	case answer == headRefuses:
		err = fmt.Errorf("the head refused this agent's proof: $%s is not this job's key", AgentKeyEnv)
	case answer != headAccepts:
		err = fmt.Errorf("the head answered %q to this agent's proof", answer)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	t.SetDeadline(time.Time{})
	return t, nil
}
