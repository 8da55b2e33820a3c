//go:build !linux

package jobs

import "net"

// peerUID cannot tell, off Linux, whose socket the other end of c is.
func peerUID(c net.Conn) (uid int, ok bool) { return 0, false }

// queued cannot tell, off Linux, what c's peer has sent.
func queued(c net.Conn) int { return 0 }
