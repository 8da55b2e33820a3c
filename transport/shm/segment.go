//go:build linux

package shm

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/shmring"
)

// A connection's shared segment, created by the connecting (sending) side
// and passed to the listener by file descriptor:
//
//	0      magic and version, ring sizes
//	64     data ring head      (sender writes)
//	128    data ring tail      (receiver writes)
//	192    control ring head   (receiver writes)
//	256    control ring tail   (sender writes)
//	320    receiver's doorbell flag
//	384    sender's doorbell flag
//	448    eager bytes the receiver consumed (credit)
//	4096   data ring, then control ring
const (
	segMagic      = 0x31534d4853524f47 // "GORSHMS1"
	offDataHead   = 64
	offDataTail   = 128
	offCtrlHead   = 192
	offCtrlTail   = 256
	offRecvFlag   = 320
	offSendFlag   = 384
	offConsumed   = 448
	segHdr        = 4096
	ctrlRingSize  = 64 << 10
	minRingSize   = 64 << 10
	maxRingSize   = 1 << 30
	flagParked    = 1 // ring me when you publish something for me
	flagWantSpace = 2 // and when you free room in the ring I write
	// flagIdle: nobody polls or waits on this side; ring me for what needs
	// my progress (a rendezvous, a control record, queued records), not
	// for an eager message, which waits in the ring for my next poll.
	flagIdle = 4
	// ringProgress: what a publication that needs the peer's progress
	// (not an eager message) rings for.
	ringProgress = flagParked | flagIdle
)

// segment is a mapped connection segment.
type segment struct {
	mem  []byte
	data ring
	ctrl ring
}

func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }

func segSize(ring int) int { return segHdr + ring + ctrlRingSize }

// newSegment creates a segment with a data ring of ringSize bytes and
// returns it with its memory file.
func newSegment(ringSize int) (*segment, int, error) {
	fd, err := unix.MemfdCreate("gorun-shm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(segSize(ringSize))); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("size the segment: %w", err)
	}
	s, err := mapSegment(fd, ringSize)
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	*s.u64(8) = uint64(ringSize)
	atomic.StoreUint64(s.u64(0), segMagic)
	return s, fd, nil
}

// mapSegment maps the segment in fd, whose data ring is ringSize bytes.
func mapSegment(fd, ringSize int) (*segment, error) {
	if ringSize < minRingSize || ringSize > maxRingSize || ringSize&(ringSize-1) != 0 {
		return nil, fmt.Errorf("ring of %d bytes: must be a power of two from %d to %d", ringSize, minRingSize, maxRingSize)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("segment: %w", err)
	}
	if st.Size != int64(segSize(ringSize)) {
		return nil, fmt.Errorf("segment of %d bytes, want %d", st.Size, segSize(ringSize))
	}
	mem, err := unix.Mmap(fd, 0, segSize(ringSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the segment: %w", err)
	}
	s := &segment{mem: mem}
	s.data = *shmring.New(mem[segHdr:segHdr+ringSize], s.u64(offDataHead), s.u64(offDataTail), false)
	s.ctrl = *shmring.New(mem[segHdr+ringSize:], s.u64(offCtrlHead), s.u64(offCtrlTail), false)
	return s, nil
}

func (s *segment) unmap() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

// bootID identifies this boot of this host's kernel: a handle made on
// another host (or before a reboot) is refused at once. Zero when unknown.
// Read when first asked for, not as every gorun starts.
var bootID = sync.OnceValue(func() (id [16]byte) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id
	}
	h, err := hex.DecodeString(string(bytes.ReplaceAll(bytes.TrimSpace(b), []byte("-"), nil)))
	if err == nil && len(h) == 16 {
		copy(id[:], h)
	}
	return id
})

// doorbell is an eventfd: the side that owns it waits on it, the peer (and
// the owner itself) ring it.
type doorbell struct {
	f *os.File // this side's own, pollable
}

func newDoorbell() (*doorbell, int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, -1, fmt.Errorf("eventfd: %w", err)
	}
	return &doorbell{f: os.NewFile(uintptr(fd), "gorun-shm-doorbell")}, fd, nil
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// wait blocks until the doorbell rang (since the last wait) or was closed.
func (d *doorbell) wait() error {
	var b [8]byte
	_, err := d.f.Read(b[:])
	return err
}

func (d *doorbell) ring() { d.f.Write(one) }

func (d *doorbell) close() { d.f.Close() }

// ringFD rings a peer's doorbell by its descriptor.
func ringFD(fd int) { unix.Write(fd, one) }
