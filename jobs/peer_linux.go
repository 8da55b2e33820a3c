package jobs

import (
	"encoding/binary"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerUID returns the uid of the user whose socket is the other end of c,
// where that end is a socket of this host (of this network namespace),
// as ss(8) learns it: by asking the kernel through sock_diag netlink for
// the one socket with c's addresses reversed. ok is false where the other
// end is another host's, the kernel cannot say (no inet_diag), or the
// client has closed already.
func peerUID(c net.Conn) (uid int, ok bool) {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, false
	}
	// A client of an IPv4 address has an AF_INET socket, unless it
	// dialed the address mapped into IPv6.
	if l4, r4 := local.IP.To4(), remote.IP.To4(); l4 != nil && r4 != nil {
		if uid, ok := sockUID(unix.AF_INET, r4, remote.Port, l4, local.Port); ok {
			return uid, true
		}
	}
	return sockUID(unix.AF_INET6, remote.IP.To16(), remote.Port, local.IP.To16(), local.Port)
}

// The sizes of sock_diag's structures (linux/inet_diag.h) and the offsets
// gorun reads.
const (
	nlmsgLen        = 16 // struct nlmsghdr
	inetDiagReqLen  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen  = 72 // struct inet_diag_msg
	inetDiagMsgUID  = 64 // inet_diag_msg.idiag_uid
	tcpEstablished  = 1
	sockUIDTimeoutU = 100_000 // µs: the kernel answers at once, or not at all
)

// sockUID asks the kernel for the TCP socket of family whose own address
// is src:sport and whose peer is dst:dport, and returns its owner's uid
// (as this process's user namespace sees it). ok is false where there is
// no such established socket.
func sockUID(family int, src net.IP, sport int, dst net.IP, dport int) (uid int, ok bool) {
	if src == nil || dst == nil {
		return 0, false
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Usec: sockUIDTimeoutU}
	if unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv) != nil {
		return 0, false
	}
	req := make([]byte, nlmsgLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence number
	r := req[nlmsgLen:]
	r[0], r[1] = byte(family), unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	id := r[8:]                     // struct inet_diag_sockid: ports and addresses in network order
	binary.BigEndian.PutUint16(id[0:], uint16(sport))
	binary.BigEndian.PutUint16(id[2:], uint16(dport))
	copy(id[4:20], src)
	copy(id[20:36], dst)
	ne.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], ^uint32(0))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false
	}
	buf := make([]byte, 1024)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil || n < nlmsgLen+inetDiagMsgLen {
		return 0, false // an NLMSG_ERROR (ENOENT: no such socket) is shorter
	}
	if ne.Uint16(buf[4:]) != unix.SOCK_DIAG_BY_FAMILY {
		return 0, false
	}
	m := buf[nlmsgLen:]
	// The lookup falls back on a listener bound to the address; only
	// the client's own, established socket says whose it is.
	if m[1] != tcpEstablished {
		return 0, false
	}
	return int(ne.Uint32(m[inetDiagMsgUID:])), true
}

// queued returns the bytes that c's peer has sent and the kernel holds
// unread (SIOCINQ); 0 where it cannot say.
func queued(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	return n
}
