// Command gorun-plugin-collexample is gorun's example collective plugin: it
// shows, small enough to read in one sitting, the path that a bridge to a
// vendor collective library takes. A rank's communicator offers it each
// collective operation; it claims only allreduce with sum on float32 or
// float64 data (at least one element) and declines everything else, which
// the communicator then runs with its own algorithms. The decision depends
// on the operation alone, so that every rank makes the same one.
//
// The design, in a few files:
//
//   - main.go (this file): main, which hands the plugin to sdk.Serve.
//   - collective.go: the sdk.Collective: what it claims, Start, the worker
//     goroutine that runs the operations in order, the allreduce algorithm
//     (every rank sends its whole input to every other rank and sums the
//     inputs in rank order, so that all ranks get bit-identical results),
//     and Close.
//   - mesh.go: Handle and Join, which connect a full mesh of TCP
//     connections on the interface that sdk.Config's Iface names (else
//     loopback), and the framing of the messages on them.
//
// Where a vendor bridge would call the library's communicator setup in Join
// and its allreduce in Start, this plugin does both itself over TCP.
//
// Build it with go build -o gorun-plugin-collexample . in this directory.
package main

import "github.com/gorun/gorun/plugins/sdk"

func main() {
	sdk.Serve(sdk.Plugin{
		Name:        "collexample",
		Version:     "0.1.0",
		Description: "example collective plugin: allreduce sum of float32/float64 over TCP",
		Collective:  newCollective,
	})
}
