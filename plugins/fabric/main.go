// Command gorun-plugin-fabric is gorun's fabric transport plugin: ranks
// talk over InfiniBand verbs, RoCE or AWS EFA (and, for tests and hosts
// without RDMA hardware, TCP or shared memory) through libfabric's tagged
// reliable-datagram endpoints (package ofi).
//
// It needs cgo and libfabric. A build without cgo still compiles, but its
// transport fails to start with an error wrapping ofi.ErrUnavailable.
package main

import "github.com/gorun/gorun/plugins/sdk"

func main() {
	sdk.Serve(sdk.Plugin{
		Name:        "fabric",
		Version:     "0.1.0",
		Description: "InfiniBand verbs, RoCE and EFA through libfabric",
		Transport:   newTransport,
	})
}
