//go:build linux

package shm

import (
	"github.com/gorun/gorun/internal/shmring"
)

// Record types. Data ring (sender to receiver): eager messages, RTS, DATA
// chunks; control ring (receiver to sender): CTS and FIN.
const (
	recEager = 2 // a=tag b=seq c=size, the message as payload
	recRTS   = 3 // a=tag b=seq c=size, payload empty or {region id, offset}
	recData  = 4 // a=seq b=offset, a chunk of the message as payload
	recCTS   = 5 // a=seq b=bytes to send
	recFIN   = 6 // a=seq: the receiver read a zero-copy message

	recHdr = shmring.Hdr
)

// ring is one direction of a connection's rings (internal/shmring).
type ring = shmring.Ring

// rec is a record read from a ring.
type rec = shmring.Rec
