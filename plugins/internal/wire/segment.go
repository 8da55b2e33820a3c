package wire

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/shmring"
	"github.com/gorun/gorun/transport"
)

// Segment is a mapped data-plane segment, seen from one side.
type Segment struct {
	Mem []byte
	// Out is the ring this side produces into (the host's submission
	// ring, the plugin's completion ring); In the one it consumes.
	Out, In *shmring.Ring
	// MyPark is this side's parked flag, TheirPark the other side's.
	MyPark, TheirPark *uint32
}

func (s *Segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.Mem[off])) }
func (s *Segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.Mem[off])) }

// NewSegment creates a segment's memory file and returns its descriptor.
func NewSegment() (int, error) {
	fd, err := unix.MemfdCreate("gorun-plugin", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, SegSize); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sizing the segment: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, HdrSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mapping the segment: %w", err)
	}
	binary.LittleEndian.PutUint64(mem, Magic)
	unix.Munmap(mem)
	return fd, nil
}

// MapSegment maps the segment in fd for the host (host true) or the
// plugin.
func MapSegment(fd int, host bool) (*Segment, error) {
	mem, err := unix.Mmap(fd, 0, SegSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the segment: %w", err)
	}
	if binary.LittleEndian.Uint64(mem) != Magic {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%w: not a gorun plugin segment (API version %d)", transport.ErrProtocol, APIVersion)
	}
	s := &Segment{Mem: mem}
	sq := mem[HdrSize : HdrSize+SQSize]
	cq := mem[HdrSize+SQSize:]
	if host {
		s.Out = shmring.New(sq, s.u64(OffSQHead), s.u64(OffSQTail), false)
		s.In = shmring.New(cq, s.u64(OffCQHead), s.u64(OffCQTail), true)
		s.MyPark, s.TheirPark = s.u32(OffHostPark), s.u32(OffPluginPark)
	} else {
		s.Out = shmring.New(cq, s.u64(OffCQHead), s.u64(OffCQTail), false)
		s.In = shmring.New(sq, s.u64(OffSQHead), s.u64(OffSQTail), true)
		s.MyPark, s.TheirPark = s.u32(OffPluginPark), s.u32(OffHostPark)
	}
	return s, nil
}

// Unmap unmaps the segment.
func (s *Segment) Unmap() {
	if s.Mem != nil {
		unix.Munmap(s.Mem)
		s.Mem = nil
	}
}

// Park sets this side's parked flag: the other side rings from now on.
func (s *Segment) Park() { atomic.StoreUint32(s.MyPark, 1) }

// Unpark clears this side's parked flag.
func (s *Segment) Unpark() { atomic.StoreUint32(s.MyPark, 0) }

// TheyParked reports whether the other side sleeps and must be rung.
func (s *Segment) TheyParked() bool { return atomic.LoadUint32(s.TheirPark) != 0 }

// Bell is an eventfd doorbell.
type Bell struct{ f *os.File }

// NewBellFD creates an eventfd.
func NewBellFD() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

// OpenBell wraps an eventfd descriptor (which it then owns) so that Wait
// parks the goroutine, not a thread.
func OpenBell(fd int, name string) (*Bell, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("doorbell %s: %w", name, err)
	}
	return &Bell{f: os.NewFile(uintptr(fd), name)}, nil
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// Ring rings the bell.
func (b *Bell) Ring() { b.f.Write(one) }

// Wait blocks until the bell rang since the last Wait, or was closed.
func (b *Bell) Wait() error {
	var buf [8]byte
	_, err := b.f.Read(buf[:])
	return err
}

// WaitFor is Wait for at most d (no limit when d is 0); it returns an
// error wrapping os.ErrDeadlineExceeded when d passed.
func (b *Bell) WaitFor(d time.Duration) error {
	if d > 0 {
		b.f.SetReadDeadline(time.Now().Add(d))
	} else {
		b.f.SetReadDeadline(time.Time{})
	}
	return b.Wait()
}

// Close closes the bell; a Wait in progress returns an error.
func (b *Bell) Close() error { return b.f.Close() }

// RegionMsg is what the host sends over the socket: a region's descriptor
// to map (Op RegionMap), or a request for the sockets of a connection the
// plugin hands off (Op RegionSockets, ID the connection's). The plugin
// answers each with the same ID: Status 0 when it mapped the region, or
// the sockets, Size of them, attached.
type RegionMsg struct {
	ID     uint64
	Size   uint64
	Status uint64
}

// The requests on the region socket, carried in a request's Status field
// (answers carry the outcome there; hosts before hand-off sent only
// RegionMap, 0).
const (
	// RegionMap asks the plugin to map the attached region.
	RegionMap = 0
	// RegionSockets asks for the sockets of a handed-off connection.
	RegionSockets = 1
)

// MaxSockets is the most descriptors one RegionMsg carries.
const MaxSockets = 16

// RegionMsgSize is the encoded size of a RegionMsg.
const RegionMsgSize = 24

// SendRegion sends m with the descriptors fds (none, a region's, or a
// connection's sockets: at most MaxSockets).
func SendRegion(c *net.UnixConn, m RegionMsg, fds ...int) error {
	if len(fds) > MaxSockets {
		return fmt.Errorf("%d descriptors in one region message (at most %d)", len(fds), MaxSockets)
	}
	var b [RegionMsgSize]byte
	binary.LittleEndian.PutUint64(b[0:], m.ID)
	binary.LittleEndian.PutUint64(b[8:], m.Size)
	binary.LittleEndian.PutUint64(b[16:], m.Status)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b[:], oob, nil)
	return err
}

// RecvRegion reads one RegionMsg and the descriptors that came with it,
// which the caller owns.
func RecvRegion(c *net.UnixConn) (RegionMsg, []int, error) {
	var b [RegionMsgSize]byte
	oob := make([]byte, unix.CmsgSpace(4*MaxSockets))
	n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
	if err != nil {
		return RegionMsg{}, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for i := range msgs {
			if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if n != RegionMsgSize {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return RegionMsg{}, nil, fmt.Errorf("%w: region message of %d bytes", transport.ErrProtocol, n)
	}
	return RegionMsg{
		ID:     binary.LittleEndian.Uint64(b[0:]),
		Size:   binary.LittleEndian.Uint64(b[8:]),
		Status: binary.LittleEndian.Uint64(b[16:]),
	}, fds, nil
}
