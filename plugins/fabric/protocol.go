package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun/gorun/plugins/fabric/ofi"
	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/transport"
)

// Tags. Bit 63 tells control (1) from data (0) messages. All control
// messages use ctrlTag; a data message's tag is its connection's id (as
// the receiving endpoint numbers its connections, connIDBits bits) and its
// sequence number in the connection (seqBits bits, wrapping).
const (
	ctrlTag    = uint64(1) << 63
	seqBits    = 40
	connIDBits = 23
	maxConnID  = 1<<connIDBits - 1
	seqMask    = uint64(1)<<seqBits - 1
)

// dataTag is the tag of message seq of connection id.
func dataTag(id uint32, seq uint64) uint64 {
	return uint64(id&maxConnID)<<seqBits | seq&seqMask
}

// Handles.
//
//	0-1   magic "gF"
//	2     version (handleVersion)
//	3-4   FNV-1a hash of the provider name, little endian
//	5-8   listener id
//	9-16  the transport's instance id
//	17    length of the endpoint name
//	18-   the endpoint name (fi_getname)
const (
	handleVersion = 1
	handleHeader  = 18
	maxNameLen    = transport.MaxHandleSize - handleHeader
)

// handle is what a listener's Handle encodes.
type handle struct {
	provider string // as far as the hash goes: decode leaves it ""
	provHash uint16
	listener uint32
	instance uint64
	name     []byte
}

func provHash(p string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(p))
	s := h.Sum32()
	return uint16(s ^ s>>16)
}

func (h handle) encode() []byte {
	b := make([]byte, handleHeader+len(h.name))
	b[0], b[1], b[2] = 'g', 'F', handleVersion
	binary.LittleEndian.PutUint16(b[3:], provHash(h.provider))
	binary.LittleEndian.PutUint32(b[5:], h.listener)
	binary.LittleEndian.PutUint64(b[9:], h.instance)
	b[17] = byte(len(h.name))
	copy(b[handleHeader:], h.name)
	return b
}

// decodeHandle parses a handle; bytes that are not one are an error
// wrapping ErrBadHandle.
func decodeHandle(b []byte) (handle, error) {
	var h handle
	switch {
	case len(b) < handleHeader || b[0] != 'g' || b[1] != 'F':
		return h, fmt.Errorf("fabric: %d bytes are not a fabric handle: %w", len(b), sdk.ErrBadHandle)
	case b[2] != handleVersion:
		return h, fmt.Errorf("fabric: handle version %d, this plugin reads %d: %w", b[2], handleVersion, sdk.ErrBadHandle)
	case int(b[17]) != len(b)-handleHeader || b[17] == 0:
		return h, fmt.Errorf("fabric: handle with a name of %d bytes in %d: %w", b[17], len(b), sdk.ErrBadHandle)
	}
	h.provHash = binary.LittleEndian.Uint16(b[3:])
	h.listener = binary.LittleEndian.Uint32(b[5:])
	h.instance = binary.LittleEndian.Uint64(b[9:])
	h.name = append([]byte(nil), b[handleHeader:]...)
	return h, nil
}

// Control messages.
//
//	0     kind
//	1-8   the sender's instance id
//	9-12  a
//	13-16 b
//	17-24 n
//	25    name length
//	26-   name
type msgKind byte

const (
	msgConnect   msgKind = 1 + iota // a: listener id, b: the connector's id, name: its endpoint
	msgAccept                       // a: the connector's id, b: the id the receiver assigned
	msgRefuse                       // a: the connector's id
	msgCloseSend                    // the sender closed: a: the receiver's id, n: its sends that were done
	msgCloseRecv                    // the receiver closed: a: the sender's id
	msgHeartbeat
	msgBye    // the sender's transport is closing: send it nothing more
	msgByeAck // answer to msgBye
)

const (
	ctrlHeader    = 26
	ctrlBufSize   = 256
	ctrlRecvCount = 16
)

type ctrlMsg struct {
	kind msgKind
	from uint64
	a, b uint32
	n    uint64
	name []byte
}

func (m ctrlMsg) encode() []byte {
	b := make([]byte, ctrlHeader+len(m.name))
	b[0] = byte(m.kind)
	binary.LittleEndian.PutUint64(b[1:], m.from)
	binary.LittleEndian.PutUint32(b[9:], m.a)
	binary.LittleEndian.PutUint32(b[13:], m.b)
	binary.LittleEndian.PutUint64(b[17:], m.n)
	b[25] = byte(len(m.name))
	copy(b[ctrlHeader:], m.name)
	return b
}

func decodeCtrl(b []byte) (ctrlMsg, error) {
	var m ctrlMsg
	if len(b) < ctrlHeader || int(b[25]) != len(b)-ctrlHeader || b[0] == 0 || msgKind(b[0]) > msgByeAck {
		return m, errors.New("bad control message")
	}
	m.kind = msgKind(b[0])
	m.from = binary.LittleEndian.Uint64(b[1:])
	m.a = binary.LittleEndian.Uint32(b[9:])
	m.b = binary.LittleEndian.Uint32(b[13:])
	m.n = binary.LittleEndian.Uint64(b[17:])
	m.name = append([]byte(nil), b[ctrlHeader:]...)
	return m, nil
}

// ctrlSlot is one posted control receive.
type ctrlSlot struct {
	buf [ctrlBufSize]byte
	req *ofi.Request
}

// ctrlSend is a control message in flight, to peer p.
type ctrlSend struct {
	req *ofi.Request
	p   *peer
}

// postCtrlRecv posts s's control receive, from any peer. Called with t.mu
// held.
func (t *transportImpl) postCtrlRecv(s *ctrlSlot) error {
	r, err := t.ep.Recv(ofi.AddrUnspec, ctrlTag, s.buf[:], nil)
	if err != nil {
		return fmt.Errorf("fabric: posting a control receive (provider %q): %w", t.choice.provider, err)
	}
	s.req = r
	return nil
}

// nameLabel renders an endpoint name for messages: "ip:port" for socket
// addresses (tcp, verbs;ofi_rxm), the string of string names (shm), hex
// otherwise.
func nameLabel(provider string, name []byte) string {
	if len(name) >= 8 {
		switch binary.NativeEndian.Uint16(name) {
		case syscall.AF_INET:
			return net.JoinHostPort(net.IP(name[4:8]).String(), strconv.Itoa(int(binary.BigEndian.Uint16(name[2:4]))))
		case syscall.AF_INET6:
			if len(name) >= 24 {
				return net.JoinHostPort(net.IP(name[8:24]).String(), strconv.Itoa(int(binary.BigEndian.Uint16(name[2:4]))))
			}
		}
	}
	s := string(bytes.TrimRight(name, "\x00"))
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }) < 0 {
		return s
	}
	return provider + ":" + hex.EncodeToString(name)
}
