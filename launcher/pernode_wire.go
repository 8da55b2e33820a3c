package launcher

// The wire of a per-node launch: the nodes' connections to the endpoint.
// Nothing is known about the other side but the token the nodes share,
// so both prove it, bound to the TLS session as the connect-back's agents
// do (see connectback.go). The endpoint is the party that can be
// squatted (whoever binds its port first serves it), so it proves
// nothing first:
//
//   - the endpoint shows a certificate it made when it started (no CA, no
//     name: nobody can check it);
//   - the node sends its proof first, HMAC-SHA256(token, "node", EKM),
//     EKM being 32 bytes of the TLS session's exported keying material,
//     and nothing else;
//   - the endpoint checks it, and only then answers with its own proof,
//     HMAC-SHA256(token, "endpoint", EKM); a wrong proof gets one
//     refusal line that is the same whatever was sent;
//   - the node checks the endpoint's proof, and only then says anything
//     of itself and its job: its hello.
//
// So a party without the token that connects to the endpoint gets
// nothing computed from the token, to guess it from offline. A squatter
// of the endpoint's port does get a node's proof, which is worth nothing
// on another TLS session (so a relay in the middle, two sessions, gets
// neither side to accept it), but which it could try guesses of the token
// against offline: that is why the token must hold at least 128 bits
// (ReadToken, tokenBits), and why a node does not even dial an endpoint
// on its own host whose port another user holds (listenEndpoint). After
// the handshake, the messages are JSON lines both ways. The proofs are
// internal/selfcert's, as the connect-back's are.

import (
	"bufio"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/selfcert"
)

// The per-node wire's labels: the TLS exporter's, and the start of each
// side's proof line, with the wire's version (2: the node proves first).
const (
	rdzvEKMLabel = "EXPORTER-gorun-rdzv-proof"
	rdzvPrefix   = "GORUN-RDZV 2 "
)

// rdzvRefusal is the endpoint's answer to a node that did not prove the
// token: the same line whatever the node sent.
const rdzvRefusal = "this node did not prove the job's token (a different token there or here, or another version of gorun)"

// Heartbeats on the nodes' connections: each side writes one this often
// and takes the other as gone after rdzvSilence without a line.
const (
	rdzvBeat    = 2 * time.Second
	rdzvSilence = 10 * time.Second
	rdzvShake   = 10 * time.Second // the handshake's bound
	rdzvMaxLine = 64 << 10
)

// ErrRdzvRefused is wrapped by a node's error when the endpoint or the
// node could not prove the token: retrying cannot help.
var ErrRdzvRefused = errors.New("refused")

// rdzvProof is one side's ("node", "endpoint") proof of the token on the
// TLS session whose keying material is ekm (selfcert.EKM), in hex.
func rdzvProof(token []byte, side string, ekm []byte) string {
	return hex.EncodeToString(selfcert.Proof(token, rdzvWhat(side), ekm))
}

// rdzvWhat is what side's proof of the token says it is.
func rdzvWhat(side string) string { return "gorun rdzv " + side + "\x00" }

// rdzvProofHolds reports whether line, after rdzvPrefix, is side's proof
// of the token on the session of ekm, compared in constant time.
func rdzvProofHolds(proof string, token []byte, side string, ekm []byte) bool {
	b, err := hex.DecodeString(proof)
	return err == nil && selfcert.ProofHolds(b, token, rdzvWhat(side), ekm)
}

// joinHello is what a node says after the endpoint proved the token.
type joinHello struct {
	ID      string   `json:"id"`    // --rdzv-id
	NProc   int      `json:"nproc"` // --nproc-per-node
	Min     int      `json:"min"`   // --nnodes
	Max     int      `json:"max"`
	Host    string   `json:"host"` // its host name, for messages
	Argv    []string `json:"argv"`
	Version string   `json:"version"`
	Self    string   `json:"self,omitempty"` // the endpoint's own node: the nonce the endpoint gave it in memory
}

// nodeStart tells a node to start its agent for a round.
type nodeStart struct {
	Name  string   `json:"name"`  // the node's name in the plan
	Port  int      `json:"port"`  // the head's port for agents, on the endpoint's address
	Env   []string `json:"env"`   // the agent's key and the head's certificate (agentDoor.env)
	Leave bool     `json:"leave"` // elastic: the agent leaves on a signal
	Rank  int      `json:"rank"`  // the node's rank in the round
	Nodes int      `json:"nodes"`
}

// nodeMsg is one line from the endpoint to a node; one field is set.
type nodeMsg struct {
	Wait    string     `json:"wait,omitempty"`    // joined; why it waits
	Start   *nodeStart `json:"start,omitempty"`   // start the agent
	Restart bool       `json:"restart,omitempty"` // the round ended: answer Ready once the agent is gone
	End     *int       `json:"end,omitempty"`     // the job ended with this status
	Error   string     `json:"error,omitempty"`   // refused or failed: the node exits
	Beat    bool       `json:"beat,omitempty"`
}

// joinMsg is one line from a node to the endpoint.
type joinMsg struct {
	Ready bool `json:"ready,omitempty"` // after Restart: the agent is gone, the node stays
	Beat  bool `json:"beat,omitempty"`
}

// lineConn is a JSON-lines connection: writes are whole lines under a
// lock, reads bounded and with a silence deadline.
type lineConn struct {
	c  *tls.Conn
	r  *bufio.Reader
	mu sync.Mutex
}

func newLineConn(c *tls.Conn) *lineConn { return &lineConn{c: c, r: bufio.NewReaderSize(c, 4096)} }

// send writes v as one line.
func (l *lineConn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.SetWriteDeadline(time.Now().Add(rdzvSilence))
	_, err = l.c.Write(append(b, '\n'))
	return err
}

// recv reads one line into v, waiting at most silence.
func (l *lineConn) recv(v any, silence time.Duration) error {
	l.c.SetReadDeadline(time.Now().Add(silence))
	line, err := readLine(l.r, rdzvMaxLine)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(line), v)
}

// beat writes v every rdzvBeat until stop closes or a write fails.
func (l *lineConn) beat(v any, stop <-chan struct{}) {
	t := time.NewTicker(rdzvBeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if l.send(v) != nil {
				return
			}
		}
	}
}

// acceptNode runs the endpoint's side of the handshake on c: it waits
// for the node's proof, answers with its own only when that proof holds,
// and returns the node's hello.
func acceptNode(c net.Conn, cert tls.Certificate, token []byte) (*lineConn, joinHello, error) {
	var h joinHello
	t := tls.Server(c, selfcert.ServerConfig(cert))
	t.SetDeadline(time.Now().Add(rdzvShake))
	if err := t.Handshake(); err != nil {
		return nil, h, fmt.Errorf("TLS handshake: %w", err)
	}
	ekm, err := selfcert.EKM(t.ConnectionState(), rdzvEKMLabel)
	if err != nil {
		return nil, h, err
	}
	l := newLineConn(t)
	line, err := readLine(l.r, 256)
	if errors.Is(err, io.EOF) {
		return nil, h, errors.New("it hung up before it proved the token")
	} else if err != nil {
		return nil, h, fmt.Errorf("no proof of the token: %w", err)
	}
	proof, ok := strings.CutPrefix(line, rdzvPrefix)
	if !ok || !rdzvProofHolds(proof, token, "node", ekm) {
		l.send(nodeMsg{Error: rdzvRefusal})
		if !ok {
			return nil, h, fmt.Errorf("%w: it does not speak this gorun's per-node wire (version 2)", ErrRdzvRefused)
		}
		return nil, h, fmt.Errorf("%w: it does not know the job's token", ErrRdzvRefused)
	}
	// The node knows the token: the endpoint's proof tells it nothing new.
	if _, err := t.Write([]byte(rdzvPrefix + rdzvProof(token, "endpoint", ekm) + "\n")); err != nil {
		return nil, h, err
	}
	if err := l.recv(&h, rdzvShake); errors.Is(err, io.EOF) {
		return nil, h, errors.New("it hung up after the endpoint's proof of the token")
	} else if err != nil {
		return nil, h, fmt.Errorf("no hello: %w", err)
	}
	t.SetDeadline(time.Time{})
	return l, h, nil
}

// dialEndpoint runs a node's side of the handshake with the endpoint at
// addr: it proves the token, checks the endpoint's proof, and only then
// sends hello. An endpoint that answers and fails (no TLS, a wrong proof,
// a refusal) is an error wrapping ErrRdzvRefused: retrying cannot help.
func dialEndpoint(addr string, token []byte, hello joinHello) (*lineConn, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	// The endpoint's proof of the token, below, is the whole
	// verification: its certificate is made on the spot.
	t := tls.Client(c, selfcert.ProofConfig())
	t.SetDeadline(time.Now().Add(rdzvShake))
	if err := t.Handshake(); err != nil {
		c.Close()
		if !transient(err) {
			// It answered, and not as gorun's TLS does.
			return nil, fmt.Errorf("%w: the endpoint %s is not a gorun endpoint: TLS handshake: %w", ErrRdzvRefused, addr, err)
		}
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	ekm, err := selfcert.EKM(t.ConnectionState(), rdzvEKMLabel)
	if err != nil {
		t.Close()
		return nil, err
	}
	if _, err := t.Write([]byte(rdzvPrefix + rdzvProof(token, "node", ekm) + "\n")); err != nil {
		t.Close()
		return nil, fmt.Errorf("send this node's proof of the token: %w", err)
	}
	l := newLineConn(t)
	line, err := readLine(l.r, rdzvMaxLine)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("no answer to this node's proof of the token: %w", err)
	}
	proof, ok := strings.CutPrefix(line, rdzvPrefix)
	if !ok {
		t.Close()
		// The endpoint's refusal, word for word: a squatter's own text is
		// not shown.
		var m nodeMsg
		if json.Unmarshal([]byte(line), &m) == nil && m.Error == rdzvRefusal {
			return nil, fmt.Errorf("%w by the endpoint: %s", ErrRdzvRefused, m.Error)
		}
		return nil, fmt.Errorf("%w: the endpoint %s answered, but not as this gorun's per-node wire (version 2) does: another version of gorun, or not gorun", ErrRdzvRefused, addr)
	}
	if !rdzvProofHolds(proof, token, "endpoint", ekm) {
		t.Close()
		// An endpoint with the token would have proved it: it took this
		// node's proof, so it has the same token.
		return nil, fmt.Errorf("%w: the endpoint %s did not prove that it knows the job's token: not this job's endpoint", ErrRdzvRefused, addr)
	}
	if err := l.send(hello); err != nil {
		t.Close()
		return nil, err
	}
	t.SetDeadline(time.Time{})
	return l, nil
}

// transient reports whether err, from a connection, may not happen on
// the next one: the other side hung up, reset or timed out (an endpoint
// that is starting, or shedding load), rather than answered wrongly.
func transient(err error) bool {
	var ne net.Error
	return closedByPeer(err) || errors.Is(err, net.ErrClosed) || errors.As(err, &ne) && ne.Timeout()
}
