package ofi

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrUnavailable is returned by every function of a build without cgo or
// off Linux, where libfabric cannot be used.
var ErrUnavailable = errors.New("ofi: libfabric not available in this build")

// ErrClosed is the error of operations on a closed Endpoint or MR, and of
// Requests still in flight when their Endpoint was closed.
var ErrClosed = errors.New("ofi: endpoint closed")

// ErrTruncated is wrapped by the error of a receive whose message was longer
// than its buffer (FI_ETRUNC).
var ErrTruncated = errors.New("ofi: message truncated")

// fiETRUNC is libfabric's FI_ETRUNC (ofi.go checks it against the header).
const fiETRUNC = 265

// Info describes one usable provider, as reported by fi_getinfo.
type Info struct {
	Provider string // provider name, e.g. "tcp;ofi_rxm", "shm", "efa"
	Fabric   string // fabric name, e.g. "127.0.0.1/32"
	Domain   string // domain name, e.g. "lo", "mlx5_0"

	// DirectedRecv reports whether receives can be restricted to one peer
	// (FI_DIRECTED_RECV); Providers leaves it false, Endpoint.Info sets it.
	DirectedRecv bool
	// MRLocal reports whether the domain needs local memory registration
	// (FI_MR_LOCAL in its mr_mode).
	MRLocal bool
}

// Addr is a peer's address in an Endpoint's address vector (fi_addr_t), as
// returned by Endpoint.Insert.
type Addr uint64

// AddrUnspec (FI_ADDR_UNSPEC) as the source of Recv matches a message from
// any peer.
const AddrUnspec = Addr(^uint64(0))

// Error is a libfabric failure: the call that failed, its positive error
// code (an errno value, or a libfabric code from 256 up such as FI_ETRUNC)
// and fi_strerror's text, with the provider's own explanation if it gave one.
type Error struct {
	Op   string // libfabric call, e.g. "fi_getinfo", "fi_cq_readerr"
	Code int    // positive FI_E* / errno code
	Msg  string // fi_strerror(Code), plus provider detail
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Msg, e.Code)
}

// Is makes errors.Is(err, ErrTruncated) true for FI_ETRUNC.
func (e *Error) Is(target error) bool {
	return target == ErrTruncated && e.Code == fiETRUNC
}

// Unwrap returns the syscall.Errno for codes that are errno values (below
// 256), so that errors.Is(err, syscall.ECONNREFUSED) works; nil otherwise.
func (e *Error) Unwrap() error {
	if e.Code > 0 && e.Code < 256 {
		return syscall.Errno(e.Code)
	}
	return nil
}
