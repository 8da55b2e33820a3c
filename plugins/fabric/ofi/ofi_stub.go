//go:build !cgo || !linux

package ofi

import "context"

// Providers lists usable providers; in this build it returns ErrUnavailable.
func Providers(hint string) ([]Info, error) { return nil, ErrUnavailable }

// Endpoint is an open reliable-datagram endpoint; in this build none can
// be opened.
type Endpoint struct{}

// Open opens an Endpoint; in this build it returns ErrUnavailable.
func Open(provider string) (*Endpoint, error) { return nil, ErrUnavailable }

// OpenDomain opens an Endpoint on one domain; in this build it returns
// ErrUnavailable.
func OpenDomain(provider, domain string) (*Endpoint, error) { return nil, ErrUnavailable }

// Info describes the endpoint's provider; in this build it is empty.
func (e *Endpoint) Info() Info { return Info{} }

// Name returns the endpoint's address; in this build it returns
// ErrUnavailable.
func (e *Endpoint) Name() ([]byte, error) { return nil, ErrUnavailable }

// Insert adds a peer's address; in this build it returns ErrUnavailable.
func (e *Endpoint) Insert(name []byte) (Addr, error) { return 0, ErrUnavailable }

// MR is a buffer prepared for repeated Send and Recv.
type MR struct{}

// Register prepares buf for Send and Recv; in this build it returns
// ErrUnavailable.
func (e *Endpoint) Register(buf []byte) (*MR, error) { return nil, ErrUnavailable }

// RegisterExternal prepares non-Go memory for zero-copy Send and Recv; in
// this build it returns ErrUnavailable.
func (e *Endpoint) RegisterExternal(mem []byte) (*MR, error) { return nil, ErrUnavailable }

// External reports whether the MR was made by RegisterExternal; in this
// build it is false.
func (m *MR) External() bool { return false }

// Close releases the MR; in this build it does nothing.
func (m *MR) Close() error { return nil }

// Request is a posted Send or Recv.
type Request struct{}

// Send posts a tagged send; in this build it returns ErrUnavailable.
func (e *Endpoint) Send(to Addr, tag uint64, buf []byte, mr *MR) (*Request, error) {
	return nil, ErrUnavailable
}

// Recv posts a tagged receive; in this build it returns ErrUnavailable.
func (e *Endpoint) Recv(from Addr, tag uint64, buf []byte, mr *MR) (*Request, error) {
	return nil, ErrUnavailable
}

// Progress reaps completions; in this build it returns ErrUnavailable.
func (e *Endpoint) Progress() (int, error) { return 0, ErrUnavailable }

// Test reports the Request's state; in this build it returns ErrUnavailable.
func (r *Request) Test() (done bool, n int, err error) { return false, 0, ErrUnavailable }

// Status reports the Request's state without progress; in this build it
// returns ErrUnavailable.
func (r *Request) Status() (done bool, n int, err error) { return false, 0, ErrUnavailable }

// Cancel cancels the Request; in this build it returns ErrUnavailable.
func (r *Request) Cancel() error { return ErrUnavailable }

// Wait waits for the Request; in this build it returns ErrUnavailable.
func (r *Request) Wait(ctx context.Context) (int, error) { return 0, ErrUnavailable }

// Close closes the endpoint; in this build it does nothing.
func (e *Endpoint) Close() error { return nil }
