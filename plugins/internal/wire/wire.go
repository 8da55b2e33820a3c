// Package wire is what a rank (the host) and a plugin process built with
// plugins/sdk agree on: the go-plugin handshake, the gRPC control service
// and its messages, the layout of the shared segment that carries the data
// plane, its record types and status codes, and the file descriptors the
// host passes at start.
//
// # Data plane
//
// The host creates one segment (a memfd) per plugin process and passes it at
// start, with a Unix socket for passing more memory by descriptor and two
// eventfd doorbells. The segment holds two rings of records
// (internal/shmring): the submission ring, host to plugin, carries work
// requests; the completion ring, plugin to host, carries their results.
// Small payloads travel inside the records; larger ones are referenced as
// {region, offset, length} in memory the host shared over the socket. Each
// side sets its parked flag before it sleeps on its doorbell, and the other
// side rings the doorbell only when the flag is set, so that no system call
// is made while both poll.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/go-plugin"

	"github.com/gorun/gorun/transport"
)

// APIVersion is the version of everything in this package. Hosts and
// plugins offer the versions they speak in go-plugin's versioned plugin
// sets; a change to a message or the segment below needs a new version.
const APIVersion = 1

// Handshake is the go-plugin handshake of every gorun transport and
// collective plugin. Its ProtocolVersion is go-plugin's default; the
// version that matters is the plugin set's (APIVersion).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "GORUN_PLUGIN_COOKIE",
	MagicCookieValue: "gorun-transport-plugin",
}

// PluginName is the name of the one plugin in the set (go-plugin
// dispenses plugins by name).
const PluginName = "gorun"

// The descriptors the host passes in ExtraFiles, as the plugin sees them.
const (
	FDSegment    = 3 // the shared segment (memfd)
	FDSocket     = 4 // a Unix stream socket for region descriptors
	FDPluginBell = 5 // eventfd the plugin sleeps on, the host rings
	FDHostBell   = 6 // eventfd the host sleeps on, the plugin rings
)

// Segment layout: a header page with the rings' indices and the parked
// flags, each in its own cache line, then the submission ring, then the
// completion ring.
const (
	Magic         = 0x31474c5052524f47 // "GORRPLG1"
	OffSQHead     = 64
	OffSQTail     = 128
	OffCQHead     = 192
	OffCQTail     = 256
	OffPluginPark = 320
	OffHostPark   = 384
	HdrSize       = 4096
	SQSize        = 1 << 20
	CQSize        = 1 << 20
	SegSize       = HdrSize + SQSize + CQSize
)

// Inline is the largest payload carried inside a ring record: sends up to
// it are copied into the submission ring, receives up to it come back in
// the completion ring, and the SDK's wire header carries messages up to it
// in one transport message.
const Inline = 8 << 10

// Submission record types (host to plugin). A is a connection or
// collective id, B the request id, C the tag.
const (
	SQSendInline = 16 + iota // payload: the message
	SQSendRef                // payload: Ref
	SQRecvInline             // payload: 8-byte length; the data comes back inline
	SQRecvRef                // payload: Ref
	SQCloseConn              // A: connection; B: request id of the close
	SQColl                   // A: 0; B: request id; payload: CollReq (JSON)
	SQDev                    // A: 0; B: request id; payload: MemReq (JSON); the CQDone payload: MemReply (JSON) or nothing
)

// Completion record types (plugin to host).
const (
	// CQDone completes request A with size B and status C; the payload is
	// the received data (inline receives) or the error text.
	CQDone = 48 + iota
)

// Status codes of CQDone.
const (
	StatusOK = iota
	StatusPeerLost
	StatusClosed
	StatusTruncated
	StatusProtocol
	StatusDeclined
	StatusBadHandle
	StatusOther
)

// ErrDeclined is the status of a collective the plugin did not run.
var ErrDeclined = errors.New("collective declined by the plugin")

// StatusOf maps an error to its status code.
func StatusOf(err error) uint64 {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, ErrDeclined):
		return StatusDeclined
	case errors.Is(err, transport.ErrTruncated):
		return StatusTruncated
	case errors.Is(err, transport.ErrClosed):
		return StatusClosed
	case errors.Is(err, transport.ErrPeerLost):
		return StatusPeerLost
	case errors.Is(err, transport.ErrProtocol):
		return StatusProtocol
	case errors.Is(err, transport.ErrBadHandle):
		return StatusBadHandle
	}
	return StatusOther
}

// Sentinel returns the error a status code stands for (nil for OK and for
// codes without one).
func Sentinel(status uint64) error {
	switch status {
	case StatusPeerLost:
		return transport.ErrPeerLost
	case StatusClosed:
		return transport.ErrClosed
	case StatusTruncated:
		return transport.ErrTruncated
	case StatusProtocol:
		return transport.ErrProtocol
	case StatusDeclined:
		return ErrDeclined
	case StatusBadHandle:
		return transport.ErrBadHandle
	}
	return nil
}

// Ref is memory in a region the host shared: 24 bytes on the ring.
type Ref struct {
	Region uint64
	Off    uint64
	Len    uint64
}

// Put writes r into b (24 bytes).
func (r Ref) Put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], r.Region)
	binary.LittleEndian.PutUint64(b[8:], r.Off)
	binary.LittleEndian.PutUint64(b[16:], r.Len)
}

// RefSize is the size of an encoded Ref.
const RefSize = 24

// ParseRef reads a Ref.
func ParseRef(b []byte) (Ref, error) {
	if len(b) != RefSize {
		return Ref{}, fmt.Errorf("%w: memory reference of %d bytes", transport.ErrProtocol, len(b))
	}
	return Ref{
		Region: binary.LittleEndian.Uint64(b[0:]),
		Off:    binary.LittleEndian.Uint64(b[8:]),
		Len:    binary.LittleEndian.Uint64(b[16:]),
	}, nil
}

// CollReq is the payload of an SQColl record.
type CollReq struct {
	Op   CollOp `json:"op"`
	Send Ref    `json:"send"`
	Recv Ref    `json:"recv"`
}

// CollOp mirrors sdk.Op (the SDK converts; TestPluginAPIStructsEqual
// holds their fields and JSON names equal).
type CollOp struct {
	Kind  string `json:"kind"`
	DType string `json:"dtype"`
	RedOp string `json:"redop,omitempty"`
	Count int    `json:"count"`
	Root  int    `json:"root,omitempty"`
	Rank  int    `json:"rank"`
	Size  int    `json:"size"`
}
