package collectives

import (
	"encoding/binary"
	"fmt"
)

// Every data message starts with a header of hdrLen bytes that says which
// call of which rank it belongs to, so that a rank that made another call
// than its peers (another collective, type, operator, count, root or
// algorithm table) is detected on the first message it exchanges:
//
//	0  magic   1  class   2  kind   3  dtype   4  op   5  algorithm   6  phase   7  0
//	8  root (int32)   12 seq (uint32)   16 count (int64)   24 step (uint32)   28 0
const (
	hdrLen   = 32
	hdrMagic = 0xc7
)

// Message classes; the class is also part of the tag.
const (
	classData uint8 = 1 // collective data
	classCtrl uint8 = 2 // aborts and departures
	classUser uint8 = 3 // Send and Recv
)

type header struct {
	class uint8
	kind  Collective
	dtype DType
	op    Op
	algo  Algorithm
	phase uint8
	root  int32
	seq   uint32
	count int64
	step  uint32
}

func (h *header) put(b []byte) {
	_ = b[hdrLen-1]
	b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7] = hdrMagic, h.class, uint8(h.kind), uint8(h.dtype), uint8(h.op), uint8(h.algo), h.phase, 0
	binary.LittleEndian.PutUint32(b[8:], uint32(h.root))
	binary.LittleEndian.PutUint32(b[12:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.count))
	binary.LittleEndian.PutUint32(b[24:], h.step)
	binary.LittleEndian.PutUint32(b[28:], 0)
}

func parseHeader(b []byte) (header, bool) {
	if len(b) < hdrLen || b[0] != hdrMagic {
		return header{}, false
	}
	return header{
		class: b[1], kind: Collective(b[2]), dtype: DType(b[3]), op: Op(b[4]), algo: Algorithm(b[5]), phase: b[6],
		root:  int32(binary.LittleEndian.Uint32(b[8:])),
		seq:   binary.LittleEndian.Uint32(b[12:]),
		count: int64(binary.LittleEndian.Uint64(b[16:])),
		step:  binary.LittleEndian.Uint32(b[24:]),
	}, true
}

// call describes a call the way a mismatch error prints it.
func (h header) call() string {
	switch h.kind {
	case CollBarrier:
		return fmt.Sprintf("%s (#%d)", h.kind, h.seq)
	case kindSend:
		return fmt.Sprintf("a message of %d %s", h.count, h.dtype)
	}
	s := fmt.Sprintf("%s(%d %s", h.kind, h.count, h.dtype)
	if h.kind == CollAllReduce || h.kind == CollReduce || h.kind == CollReduceScatter {
		s += ", " + h.op.String()
	}
	if h.kind == CollBroadcast || h.kind == CollReduce {
		s += fmt.Sprintf(", root %d", h.root)
	}
	return s + fmt.Sprintf(") (#%d)", h.seq)
}

// mismatch compares a received header with the expected one and says how
// they differ, or returns "".
func (h header) mismatch(got header) string {
	if got.class != h.class || got.kind != h.kind || got.dtype != h.dtype || got.count != h.count ||
		(h.kind != kindSend && (got.op != h.op || got.root != h.root || got.seq != h.seq)) {
		return fmt.Sprintf("it called %s, this rank %s", got.call(), h.call())
	}
	if got.algo != h.algo || got.phase != h.phase {
		return fmt.Sprintf("it ran %s with algorithm %s (phase %d), this rank with %s (phase %d): are the algorithm tables (%s) the same on every rank?",
			h.call(), got.algo, got.phase, h.algo, h.phase, EnvThresholds)
	}
	if got.step != h.step {
		return fmt.Sprintf("%s: step %d arrived where step %d was expected", h.call(), got.step, h.step)
	}
	return ""
}

// Control messages: magic, classCtrl, type, sentinel code, subject rank,
// seq, then a text.
const (
	ctrlAbort uint8 = 1
	ctrlLeave uint8 = 2
	ctrlHdr         = 12
)

type ctrlMsg struct {
	typ     uint8
	code    uint8
	subject int32
	seq     uint32
	detail  string
}

func (m ctrlMsg) encode() []byte {
	d := m.detail
	if len(d) > EagerBytes-ctrlHdr {
		d = d[:EagerBytes-ctrlHdr]
	}
	b := make([]byte, ctrlHdr+len(d))
	b[0], b[1], b[2], b[3] = hdrMagic, classCtrl, m.typ, m.code
	binary.LittleEndian.PutUint32(b[4:], uint32(m.subject))
	binary.LittleEndian.PutUint32(b[8:], m.seq)
	copy(b[ctrlHdr:], d)
	return b
}

func decodeCtrl(b []byte) (ctrlMsg, bool) {
	if len(b) < ctrlHdr || b[0] != hdrMagic || b[1] != classCtrl {
		return ctrlMsg{}, false
	}
	return ctrlMsg{
		typ: b[2], code: b[3],
		subject: int32(binary.LittleEndian.Uint32(b[4:])),
		seq:     binary.LittleEndian.Uint32(b[8:]),
		detail:  string(b[ctrlHdr:]),
	}, true
}
