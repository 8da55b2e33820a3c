package collectives

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap them (most through
// a [*PeerError] that names the rank concerned); test with errors.Is.
var (
	// ErrPeerGone means a rank of the communicator died, lost its
	// connection, or closed its communicator before taking part in the
	// operation.
	ErrPeerGone = errors.New("collectives: peer gone")
	// ErrMismatch means the ranks did not make the same call: a different
	// collective, element type, operator, element count, root or algorithm
	// table, or a point-to-point message of another type or length.
	ErrMismatch = errors.New("collectives: mismatched call across ranks")
	// ErrTimeout means an operation did not complete within
	// [Options.Timeout].
	ErrTimeout = errors.New("collectives: timed out")
	// ErrAborted means a rank gave up an operation (its context was
	// canceled, or it failed for a reason of its own) and told the others.
	ErrAborted = errors.New("collectives: aborted")
	// ErrClosed is returned for operations on a closed Communicator.
	ErrClosed = errors.New("collectives: communicator closed")
	// ErrInvalid is returned, by the calling rank alone and without any
	// communication, for arguments that are wrong on their face: a bad
	// rank, root or tag, an unknown operator, buffer lengths that do not
	// fit together.
	ErrInvalid = errors.New("collectives: invalid argument")
	// ErrTruncated completes a receive, in a [P2P] implementation, whose
	// message was longer than its buffers.
	ErrTruncated = errors.New("collectives: message longer than receive buffer")
)

// PeerError is an error about one rank of a communicator.
//
// The rank that detects a failure reports it to the other ranks, which
// return a PeerError with the same Rank and sentinel and a ReportedBy naming
// the detecting rank.
type PeerError struct {
	// Op is the operation that failed ("allreduce", "recv", ...).
	Op string
	// Rank is the rank, in the communicator, that the error is about: the
	// rank that died or left, whose call did not match, or that was waited
	// for in vain.
	Rank int
	// ReportedBy is the rank that detected the failure and told this one,
	// or -1 when this rank detected it itself.
	ReportedBy int
	// Err is the sentinel: ErrPeerGone, ErrMismatch, ErrTimeout or
	// ErrAborted.
	Err error
	// Detail says what exactly happened, for people.
	Detail string
}

// Error returns "collectives: <op>: rank <n>: <sentinel>[: <detail>][
// (reported by rank <m>)]".
func (e *PeerError) Error() string {
	s := fmt.Sprintf("collectives: %s: rank %d: %s", e.Op, e.Rank, trimPrefix(e.Err))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.ReportedBy >= 0 {
		s += fmt.Sprintf(" (reported by rank %d)", e.ReportedBy)
	}
	return s
}

// Unwrap returns e.Err.
func (e *PeerError) Unwrap() error { return e.Err }

func trimPrefix(err error) string {
	s := err.Error()
	const p = "collectives: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// Wire codes for the sentinels carried by abort messages.
const (
	codeAborted uint8 = iota
	codePeerGone
	codeMismatch
	codeTimeout
)

func codeOf(err error) uint8 {
	switch {
	case errors.Is(err, ErrPeerGone):
		return codePeerGone
	case errors.Is(err, ErrMismatch):
		return codeMismatch
	case errors.Is(err, ErrTimeout):
		return codeTimeout
	}
	return codeAborted
}

func sentinelOf(code uint8) error {
	switch code {
	case codePeerGone:
		return ErrPeerGone
	case codeMismatch:
		return ErrMismatch
	case codeTimeout:
		return ErrTimeout
	}
	return ErrAborted
}
