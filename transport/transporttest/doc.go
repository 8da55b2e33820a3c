// Package transporttest holds the contract tests that every gorun
// transport must pass, built in or plugin, and benchmarks to compare
// transports with each other and with the machine's limits.
//
// A transport's test calls Run with a function that makes one rank's
// transport:
//
//	func TestContract(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) transport.Transport {
//			tr, err := tcp.New(tcp.Options{Iface: "lo"})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return tr
//		})
//	}
//
// Most tests run two transports in the test process. The tests under
// "Process" run the peer in another process: they re-execute the test
// binary with -test.run naming the same subtest and GORUN_TRANSPORTTEST_PEER
// set, so the peer calls the same newTransport inside the same test
// function. Nothing else is needed from the caller, but the test function
// that calls Run must be reachable by -test.run (a top-level Test function).
//
// # The contract
//
//   - HandleRoundTrip: a Listener's Handle is 1 to transport.MaxHandleSize
//     bytes, stable, usable after a trip through text; Peer and Info are set.
//   - Sizes: 0, 1, 3, 8, 4093, 64 KiB ± 1, 1 MiB + 13 and 64 MiB (not with
//     -short) arrive intact, with the receive posted before and after the send.
//   - OrderPerTag: messages of mixed sizes (eager and not) on three tags are
//     received in send order within each tag, whatever order of tags the
//     receives are posted in.
//   - Concurrent: eight goroutines each way, each on its own tag, keep
//     requests in flight (retrying on transport.ErrWouldBlock).
//   - BothDirections: large and small messages both ways at once.
//   - Truncated: a short receive buffer gets the message's beginning and
//     transport.ErrTruncated; the connection stays usable.
//   - Registered: buffers in transport.Regions, registered on one side, the
//     other or both; DeregMR refuses a handle in use or released.
//   - MemHandleMisuse: a buffer outside its MemHandle, or another
//     connection's MemHandle, is transport.ErrBadMemHandle.
//   - BadHandle: bytes that are not a handle are transport.ErrBadHandle; a
//     corrupted or closed listener's handle fails in bounded time.
//   - RequestMisuse: Wait with an expired context leaves the request in
//     flight; a second Wait, or Test after done, is transport.ErrRequestDone.
//   - WouldBlock: Info().MaxRequests receives may be in flight, one more is
//     transport.ErrWouldBlock; closing fails them with transport.ErrClosed.
//   - Close: Close of connections, listeners and transports is idempotent and
//     fails pending requests and later calls with transport.ErrClosed.
//   - PeerClose: when the peer closes its connection or its transport,
//     pending requests fail with transport.ErrPeerLost naming the peer within
//     LostWithin; messages whose send completed before are still delivered.
//   - Process/Exchange and Process/Kill: the same across two processes,
//     including a peer killed with SIGKILL.
//
// At the end Run checks that no goroutine of the transport's package is
// left, so call it from a test that is not run in parallel with other tests
// of that package.
package transporttest
