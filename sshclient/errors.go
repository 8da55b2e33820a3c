package sshclient

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// Kind classifies a failure to reach a host.
type Kind int

const (
	// Other is any failure that none of the other kinds describes.
	Other Kind = iota
	// Unreachable means the host could not be reached: no route, a DNS
	// failure, or a timeout during the TCP connect or the SSH handshake.
	Unreachable
	// Refused means the TCP connection was refused: nothing listens on the
	// port.
	Refused
	// AuthFailed means the server accepted none of the identities tried.
	AuthFailed
	// HostKeyUnknown means the server's host key is in no known_hosts file.
	HostKeyUnknown
	// HostKeyChanged means known_hosts holds a different key for the host
	// (or the key is revoked). Such a host is always refused.
	HostKeyChanged
	// Throttled means sshd kept closing the connection during the handshake
	// (typically MaxStartups) after all retries.
	Throttled
)

// String returns the kind in words, as HostError.Error prints it.
func (k Kind) String() string {
	switch k {
	case Unreachable:
		return "unreachable"
	case Refused:
		return "connection refused"
	case AuthFailed:
		return "authentication failed"
	case HostKeyUnknown:
		return "host key unknown"
	case HostKeyChanged:
		return "host key changed"
	case Throttled:
		return "throttled"
	default:
		return "ssh"
	}
}

// HostError is a failure to reach (or to use) a host. Error returns
// "HOST: KIND: CAUSE; HINT".
type HostError struct {
	// Host is the host as gorun's host list names it (the alias).
	Host string
	// Kind classifies the failure.
	Kind Kind
	// Err is the cause.
	Err error
	// Hint says how to fix it, or is empty.
	Hint string
}

// Error returns "HOST: KIND: CAUSE; HINT".
func (e *HostError) Error() string {
	var b strings.Builder
	b.WriteString(e.Host)
	b.WriteString(": ")
	b.WriteString(e.Kind.String())
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *HostError) Unwrap() error { return e.Err }

func hostErr(host string, k Kind, err error, hint string) *HostError {
	return &HostError{Host: host, Kind: k, Err: err, Hint: hint}
}

// classifyNet classifies an error of a TCP connect (direct or through a
// jump host).
func classifyNet(err error) Kind {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return Refused
	}
	if errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded) {
		return Unreachable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return Unreachable
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Unreachable
	}
	// Errors of a direct-tcpip channel opened by a jump host carry sshd's
	// words: "connect failed (Connection refused)", "(No route to host)".
	s := strings.ToLower(err.Error())
	switch {
	case strings.Contains(s, "connection refused"):
		return Refused
	case strings.Contains(s, "no route to host"), strings.Contains(s, "network is unreachable"),
		strings.Contains(s, "timed out"), strings.Contains(s, "name or service not known"),
		strings.Contains(s, "could not resolve"), strings.Contains(s, "temporary failure in name resolution"):
		return Unreachable
	}
	return Other
}

// cutByServer reports whether a handshake error looks like the server
// closing the connection (EOF or reset), as sshd does past MaxStartups.
func cutByServer(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection reset by peer") || strings.HasSuffix(s, ": EOF")
}
