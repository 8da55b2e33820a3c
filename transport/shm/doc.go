// Package shm is gorun's transport inside a host: shared-memory rings
// between two processes, and a single copy for messages whose send buffer
// is a registered transport.Region.
//
// # How a connection works
//
// The listener is an abstract unix socket (SOCK_SEQPACKET; abstract, so a
// killed process leaves no file behind, and scoped to the network namespace,
// as a host is). Its handle carries the socket's name, a random nonce the
// connector must present, and the kernel's boot id, so that a handle from
// another host is refused at once instead of reaching a stranger.
//
// The connecting side creates the connection's segment with memfd_create:
// a data ring (Options.RingSize) from sender to receiver, a small control
// ring back, and a header page with the rings' indices, doorbell flags and
// the eager credit. It passes the memfd and its eventfd over the socket with
// SCM_RIGHTS; the listener answers with its own eventfd. Passing
// descriptors is chosen over opening /proc/<pid>/fd/<n> because it needs no
// ptrace permission (/proc access fails for non-dumpable processes, under
// hidepid, and across PID namespaces), cannot race with the descriptor
// being closed and reused, and gives the liveness channel for free: the
// socket stays open for the connection's life, the kernel closes it when
// either process dies, and the survivor fails its pending requests at once.
//
// # Messages
//
// Messages up to Options.EagerLimit are copied into the data ring, and the
// send is done as soon as they are there. Larger ones send an RTS record;
// when the receive is posted the receiver answers CTS and the sender copies
// the message through the ring in chunks of 64 KiB (at most a quarter
// ring), pipelined with the receiver copying them out. When the send buffer lies in a
// transport.Region registered on the connection, the region's memfd was
// passed to the receiver once at RegMR time, the RTS names the region and
// offset, and the receiver copies straight from the sender's memory into
// its buffer (one copy instead of two), then answers FIN. Eager messages
// that arrive before their receive are copied out of the ring (up to a
// credit of bytes the sender may spend, after which it sends RTS instead),
// so the ring never stalls behind a message nobody receives yet.
//
// # Progress and wake-ups
//
// Rings are polled. Wait spins on its connection for Options.Spin after the
// last progress, then parks; each side has one goroutine that sleeps on an
// eventfd and makes progress when rung. A side rings its peer's eventfd
// only when the peer said, through a flag word in the segment, that nobody
// on its side is polling, and then for an eager message only while a Wait
// is parked there (request.Idler): a side whose Waits all ended without
// parking (a rank between two calls) finds the message at its next poll,
// and is rung only for what needs its progress while it is away (an RTS,
// a CTS or FIN, streamed chunks, a full ring). The ring it is spared costs
// the sender a system call and the receiver a thread woken on its own
// CPUs: with 2 ranks on 2 vCPUs, about a quarter of the calls of a 4 KiB
// AllReduce rang before, and in stretches when those wake-ups came late
// (a busy VM host), runs of 5,000 calls of it took 9-200 µs a call
// instead of 2-4 µs. BenchmarkWake measures the choices between two
// processes on the project's 2-vCPU VM, as round trips: both sides spinning
// 0.13-0.2 µs; a futex in the segment 6-11 µs; an eventfd read through Go's
// network poller 12-50 µs, a unix socket the same (both vary with how the
// VM wakes an idle vCPU). The eventfd is chosen even so: a futex wait holds
// an OS thread per sleeping connection side (a rank with 100 peers would
// park 200 threads), while an eventfd parks only a goroutine in the poller,
// passes over the socket like any descriptor, and can be woken by this
// side too (Close, or work handed to the progress goroutine); spinning
// first keeps the wake-up off busy connections' critical path (ping-pong
// 1 µs spinning, 6 µs when every message goes through the doorbells, both
// ends in one process).
//
// A connection whose peer closes delivers the messages already in the ring
// first; requests that cannot complete then fail with transport.ErrPeerLost.
// Requests in flight when either side closes may leave their buffers partly
// written.
package shm
