//go:build ignore

// goplugin is hello with hashicorp/go-plugin linked (and with it gRPC,
// protobuf, net/rpc and hclog): startcost.sh times what their package
// initialisation adds to every process that links them, as gorun does.
package main

import (
	"os"

	_ "github.com/hashicorp/go-plugin"
)

func main() { os.Stdout.WriteString("hello\n") }
