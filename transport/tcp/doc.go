// Package tcp is gorun's transport across hosts: TCP connections, several
// streams per connection where that helps, on the network interface the
// user chooses (NCCL_SOCKET_IFNAME syntax).
//
// # Wire protocol
//
// A connection is one or more TCP streams from the connecting (sending) side
// to the listener. Each stream opens with a 32-byte hello (magic, the
// listener's nonce from the handle, a connection id, the stream's index and
// count); the listener answers one byte, 'K' or 'N', once all streams of the
// connection arrived. After that both directions carry 32-byte frames:
//
//	EAGER  tag seq size, then size bytes     send -> recv, messages up to EagerLimit
//	RTS    tag seq size                      send -> recv, larger messages
//	CTS    seq limit                         recv -> send, the receive is posted
//	DATA   seq offset length, then the bytes send -> recv, after CTS, on any stream
//	CREDIT bytes                             recv -> send, eager bytes consumed
//
// Eager messages that arrive before their receive is posted are held by the
// receiver, up to a window of bytes the sender may spend (the sender sends
// RTS instead when its credit is used up), so memory stays bounded and no
// message waits behind one nobody receives. The data of a message above
// the eager limit is read straight into the receive buffer (memory is
// copied once on each side); from 2 MiB it is striped over the streams in
// contiguous parts of at least 1 MiB, and smaller ones take turns on them. A clean close is a FIN on every stream; a peer
// process that dies closes its streams too, and TCP keepalive plus
// TCP_USER_TIMEOUT bound how long a vanished host goes unnoticed
// (Options.PeerTimeout).
package tcp
