// Package sdktest holds the conformance tests that every author
// [sdk.Transport] must pass before sdk.Serve can turn it into a gorun
// transport. They test the Transport directly, without the SDK or a rank,
// so a failure points at the plugin's own code.
//
// A plugin's test calls Run with a function that makes one rank's
// Transport:
//
//	func TestTransport(t *testing.T) {
//		sdktest.Run(t, func(t *testing.T) sdk.Transport {
//			tr, err := newTransport(sdk.Config{Rank: -1, Size: -1, LocalRank: -1, Iface: "lo"})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return tr
//		})
//	}
//
// Most tests run two Transports in the test process. The tests under
// "Process" run the peer in another process: they re-execute the test
// binary with -test.run naming the same subtest and GORUN_SDKTEST_PEER set,
// so the peer calls the same function inside the same test. The test
// function that calls Run must therefore be a top-level Test function, and
// should not run in parallel with the package's other tests.
//
// # How the tests call a Transport
//
// As the SDK does: every data-path call (Send, Recv, Request.Test, and
// Register and Deregister) is made from one goroutine per test, which polls
// every request in flight; Listen, Connect, Accept, Handle, Devices and the
// Close methods are made from other goroutines. At most one Recv is pending
// per connection, and its buffer is never shorter than the message. Every
// call has a deadline: a data-path call that does not return within
// [BlockLimit], or a control call or message that takes longer than 30 s
// (GORUN_SDKTEST_TIMEOUT overrides it), fails the test instead of hanging
// it.
//
// # The contract
//
//   - Devices: returns without error; every Device has a Name.
//   - Handle: a Listener's Handle is 1 to transport.MaxHandleSize bytes and
//     stable; Connect works with a copy of it; two connections to one
//     listener are two accepted receive sides, each getting its own
//     messages; Peer is set on both sides.
//   - BadHandle: Connect with nil, empty, random (1 to 128 bytes) or
//     oversized bytes, or a live listener's handle cut by a byte or
//     extended by one, returns an error wrapping sdk.ErrBadHandle within
//     the deadline (start your handles with a few fixed bytes and end them
//     with a length or checksum, so that such bytes are told apart);
//     Connect to a closed listener's handle returns in bounded time.
//   - Sizes: messages of 0, 1, 7, 4093, 65536, 65537, 1 MiB + 13 and
//     16 MiB arrive intact with the receive posted before and after the
//     send; a receive into a buffer larger than the message reports the
//     message's length as n and leaves the rest of the buffer alone; the
//     send buffer is not modified.
//   - InFlight: 64 sends of mixed sizes (up to 1 MiB) posted before any
//     receive arrive intact and in order.
//   - BothDirections: large and small messages cross on two connections
//     between the same two Transports.
//   - Registered: buffers in transport.Alloc memory registered with
//     Transport.Register are sent and received with their Registration
//     (from and into registered memory, at offsets, mixed with heap
//     buffers passed with a nil Registration); Deregister succeeds and heap
//     messages still flow after it. Register may return a nil
//     Registration.
//   - Close: closing a connection fails its pending requests, and later
//     Sends or Recvs, with sdk.ErrClosed within [LostWithin]; the peer's
//     pending receive, and a send nobody will receive, fail with
//     sdk.ErrPeerLost within LostWithin; messages whose send was done
//     before the sender's Close are still delivered, then the receiver
//     gets ErrPeerLost (skipped for a transport whose small sends are not
//     done until their receive is posted). A second Close of a connection
//     returns.
//   - TransportClose: Transport.Close closes every listener (a pending
//     Accept returns an error) and connection (pending and later requests
//     fail with sdk.ErrClosed within LostWithin; Listen fails); the peer
//     Transport's requests on those connections fail with sdk.ErrPeerLost;
//     a second Close returns nil (or an error wrapping sdk.ErrClosed).
//   - Process/Exchange: ping-pong, every size of Sizes echoed with many
//     messages in flight, and a message from registered memory into
//     registered memory, with a peer in another process.
//   - Process/Kill: when the peer process is killed with SIGKILL, a pending
//     receive and a pending send of 16 MiB fail with sdk.ErrPeerLost within
//     LostWithin.
//   - Handoff (only for a Transport that implements sdk.Handoff): both
//     sides of a new connection hand off the same number of sockets (1 to
//     16), which gorun's TCP protocol adopts and carries messages over,
//     also after both Transports closed.
//
// A send "done" before anybody received it is allowed (a transport may
// buffer), so the tests that close or kill the peer only require
// sdk.ErrPeerLost of the sends that were still pending.
package sdktest
