// Package sdk is what a gorun plugin author imports: the interfaces a
// transport, collective or device plugin implements ([Transport],
// [Collective], [Memory]) and [Serve], which the plugin's main calls.
//
// A gorun plugin is a program that gorun's ranks start as a
// github.com/hashicorp/go-plugin subprocess. The control plane (devices,
// listen, connect, accept, registration) is gRPC; the data plane never is:
// the rank and the plugin share memfd-backed memory passed by file
// descriptor, the rank posts work requests into a ring in that memory and
// the plugin posts completions into another, each side ringing the other's
// eventfd doorbell only when it sleeps. Small messages travel inside the
// rings; larger ones stay in the rank's shared buffers, which the plugin
// maps and registers once. All of this is the SDK's: an author implements
// a handful of methods that move whole messages and calls Serve.
//
// A transport whose connections are TCP sockets can leave the data path
// altogether: implementing [Handoff] lets the SDK hand each new
// connection's sockets to the rank, which moves the data over them with
// gorun's built-in TCP protocol (no process hop, large messages striped
// over the streams). The plugin then chooses the addresses, the interface
// and the socket options, and opens the connections; nothing more.
// examples/plugins/tcpexample does it.
//
// A device plugin ([Memory]) manages memory on the rank's accelerator:
// gorun's device buffers and device collectives are built from its calls,
// which travel through the same rings. plugins/cuda is one.
package sdk
