//go:build cgo

// Command gorun-pmix is gorun's PMIx plugin: a go-plugin subprocess of the
// gorun agent that runs a PMIx server (libpmix) for the agent's ranks, so
// that Open MPI programs and mpi4py start under gorun. The agent starts it
// only for programs that need PMIx; it is not meant to be run by hand.
package main

import (
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/gorun/gorun/plugins/pmixbridge"
)

func main() {
	srv.startInit()
	defer srv.finalize()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pmixbridge.Handshake,
		Plugins:         pmixbridge.PluginSet(srv),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          hclog.New(&hclog.LoggerOptions{Name: "gorun-pmix", Level: hclog.Error, Output: os.Stderr}),
	})
}
