package sdk

import (
	"context"
	"errors"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/gorun/gorun/transport"
)

// The errors a plugin's requests and calls return. They are the transport
// package's own sentinels, so that a rank's errors.Is tests work on what
// crossed the plugin boundary.
var (
	// ErrPeerLost completes the requests of a connection whose peer closed
	// its side or went away.
	ErrPeerLost = transport.ErrPeerLost
	// ErrClosed completes the requests of a connection, listener or
	// transport that this side closed.
	ErrClosed = transport.ErrClosed
	// ErrBadHandle is returned by Connect for bytes that are not a handle
	// of this plugin's transport.
	ErrBadHandle = transport.ErrBadHandle
	// ErrNotSupported is returned for what the plugin does not provide.
	ErrNotSupported = transport.ErrNotSupported
)

// ErrDeclined is what a Collective's Start returns for an operation it does
// not run; the communicator then runs its own algorithm.
var ErrDeclined = errors.New("sdk: collective declined")

// Plugin describes a plugin binary to sdk.Serve: its name and version, and
// the factories of what it provides. A plugin provides a transport, a
// collective implementation, or both.
type Plugin struct {
	// Name is the plugin's short name ("fabric"), shown by gorun plugins
	// list and used in every message about the plugin.
	Name string
	// Version is the plugin's own version ("1.2.0").
	Version string
	// Description is one line for gorun plugins list.
	Description string
	// Transport makes the plugin's transport for one rank; nil when the
	// plugin provides none.
	Transport func(cfg Config) (Transport, error)
	// Collective makes the plugin's collective implementation for one rank;
	// nil when the plugin provides none.
	Collective func(cfg Config) (Collective, error)
	// Memory makes the plugin's device memory for one rank (a GPU's); nil
	// when the plugin manages none.
	Memory func(cfg Config) (Memory, error)
}

// Config is what the SDK tells a plugin about the rank that started it.
// The plugin also inherits the rank's environment (GORUN_*, FI_*, ...).
type Config struct {
	// Rank and Size place the rank in its job; both are -1 when the plugin
	// was started outside a job (gorun plugins list, gorun plugins test).
	Rank, Size int
	// LocalRank is the rank's index among the ranks of its host, or -1.
	LocalRank int
	// Iface is the network interface the job's traffic should use
	// (gorun --iface), or "".
	Iface string
	// Options are the plugin's options from the command line
	// (gorun --plugin-opt key=value), e.g. "provider" for plugins/fabric.
	Options map[string]string
	// Logger writes to gorun's output, tagged with the plugin's name.
	Logger hclog.Logger
	// Handoff says that the rank adopts handed-off sockets: when the
	// Transport implements Handoff, the SDK hands every connection's
	// sockets to the rank as soon as Connect or Accept returns it. A
	// transport may open several streams per connection then (gorun's TCP
	// protocol stripes large messages over them), and one otherwise.
	Handoff bool
	// Wake tells the SDK's progress loop that a request completed in
	// another goroutine, so that it tests it now rather than at its next
	// poll (up to a few hundred microseconds later, when it sleeps).
	// Transports whose requests complete only inside Test need not call
	// it. It never blocks and is safe to call from any goroutine.
	Wake func()
}

// Device is one piece of hardware (or software path) a transport can use,
// as gorun plugins list shows it.
type Device struct {
	// Name is the device's name ("mlx5_0", "lo", "efa0").
	Name string `json:"name"`
	// Provider is the library path the plugin would use ("verbs;ofi_rxm").
	Provider string `json:"provider,omitempty"`
	// PCI is the device's PCI address ("0000:3b:00.0"), or "".
	PCI string `json:"pci,omitempty"`
	// NUMA is the device's NUMA node, or -1 when unknown.
	NUMA int `json:"numa"`
	// SpeedMbps is the link speed in Mbit/s, or 0 when unknown.
	SpeedMbps int `json:"speed_mbps,omitempty"`
	// Note is anything else worth a line ("selected", "no RDMA support").
	Note string `json:"note,omitempty"`
}

// Transport is what a transport plugin author implements: the network side
// of one rank. The SDK turns it into a gorun transport (tags, matching,
// message lengths, memory sharing with the rank and the rank's requests
// are the SDK's business), so a Transport only moves whole messages, in
// order, on one-way connections.
//
// Listen, Connect, Accept, Register, Deregister and Close may be called
// from several goroutines at once, also while the data path runs. The data
// path (Send, Recv and every Request's Test, on all connections) is called
// from one goroutine, the SDK's progress loop, and must not block.
type Transport interface {
	// Devices lists what the transport can use on this host.
	Devices(ctx context.Context) ([]Device, error)
	// Listen starts listening for connections.
	Listen(ctx context.Context) (Listener, error)
	// Connect opens a connection to the listener whose Handle is handle
	// and returns its send side. Bytes that are not a handle of this
	// transport are an error wrapping ErrBadHandle.
	Connect(ctx context.Context, handle []byte) (SendConn, error)
	// Register prepares mem for sends and receives (e.g. registers it with
	// the NIC). The SDK registers the memory it shares with the rank once,
	// before passing buffers inside it to Send or Recv, and passes the
	// returned value with them. Memory the SDK did not register is passed
	// with a nil Registration.
	Register(mem []byte) (Registration, error)
	// Deregister releases a registration; no request uses it any more.
	Deregister(r Registration) error
	// Close closes every listener and connection; their pending requests
	// complete with ErrClosed.
	Close() error
}

// Progresser is implemented by a Transport whose requests move only while
// they are tested (libfabric's manual progress, for one): ManualProgress
// returning true has the SDK poll its requests without pause for as long
// as the rank waits for something from it, where it otherwise sleeps
// until Config.Wake or a timer.
type Progresser interface {
	ManualProgress() bool
}

// Handoff is implemented by a Transport whose connections are connected
// TCP sockets (or other stream sockets) that carry nothing of the
// plugin's own until the first Send or Recv. When the rank allows it
// (GORUN_PLUGIN_HANDOFF, on by default), the SDK hands the sockets of every
// new connection to the rank, which moves the data over them with gorun's
// built-in TCP protocol: the plugin chooses the network, the addresses and
// the socket options, and leaves the data path, where a process hop costs
// time. gorun plugins test runs the contract both ways.
type Handoff interface {
	// HandOff gives up conn, a SendConn or RecvConn that this Transport's
	// Connect or a Listener's Accept just returned and on which the SDK
	// has called nothing: it returns the connection's sockets (at most 16,
	// in the order the connecting side opened them, the same number on
	// both sides) and forgets the connection, without shutting the
	// sockets down. The SDK owns the files from then on and calls nothing
	// on conn. After an error, conn is still the plugin's, and the SDK
	// closes it and fails the Connect or Accept.
	HandOff(conn any) ([]*os.File, error)
}

// Registration is a Transport's record of registered memory, opaque to the
// SDK.
type Registration any

// Listener accepts connections opened with its Handle.
type Listener interface {
	// Handle returns the bytes that peers pass to Connect: at most
	// transport.MaxHandleSize (128) bytes.
	Handle() []byte
	// Accept waits for the next connection and returns its receive side.
	Accept(ctx context.Context) (RecvConn, error)
	// Close stops listening; accepted connections stay open.
	Close() error
}

// SendConn is the send side of a connection.
type SendConn interface {
	// Send starts sending buf as one message. Messages are delivered in
	// the order of their Send calls. buf stays unchanged until the
	// request is done. reg is nil or the Registration of memory that
	// contains buf.
	Send(buf []byte, reg Registration) (Request, error)
	// Peer names the other end for messages ("10.0.0.2:4711").
	Peer() string
	// Close closes the connection: pending requests complete with
	// ErrClosed, the peer's with ErrPeerLost.
	Close() error
}

// RecvConn is the receive side of a connection.
type RecvConn interface {
	// Recv starts receiving the next message into buf. The SDK makes one
	// Recv call at a time per connection (the next after the previous
	// request is done) and never passes a buffer shorter than the message:
	// it tells the receiver each message's length ahead of the message, so
	// a Transport never truncates. The request's n is the message's
	// length. reg is as for Send.
	Recv(buf []byte, reg Registration) (Request, error)
	// Peer names the other end for messages.
	Peer() string
	// Close closes the connection, as SendConn.Close does.
	Close() error
}

// Request is a send or receive in flight.
type Request interface {
	// Test reports without blocking whether the request is done, and then
	// its size and error (wrapping ErrPeerLost when the peer went away,
	// ErrClosed after Close). The SDK stops calling Test once it reported
	// done. A request whose peer died must report it within a few seconds.
	Test() (done bool, n int, err error)
}

// Memory is what a device plugin author implements: memory on the rank's
// accelerator (a GPU), which the rank fills and reads through the plugin,
// shares with the other ranks of its host (Export and Import), and on
// which the collectives copy and reduce (gorun's DeviceBuffer and its
// collectives). Pointers are the plugin's: opaque numbers to the rank,
// which adds offsets to none of them (offsets travel beside them). Every
// method may be called from several goroutines.
type Memory interface {
	// Devices lists the accelerators the plugin sees.
	Devices(ctx context.Context) ([]Device, error)
	// Alloc allocates bytes of device memory.
	Alloc(bytes int) (uint64, error)
	// Free frees what Alloc returned, or unmaps what Import did.
	Free(p uint64) error
	// Write copies src into device memory at p+off.
	Write(p uint64, off int, src []byte) error
	// Read copies device memory at p+off into dst.
	Read(dst []byte, p uint64, off int) error
	// Export returns the bytes by which another process of this host
	// maps the allocation p (a CUDA IPC handle): at most 4096.
	Export(p uint64) ([]byte, error)
	// Import maps the allocation another rank's plugin exported.
	Import(handle []byte) (uint64, error)
	// Copy copies bytes from src+srcOff to dst+dstOff, either of which may
	// be imported.
	Copy(dst uint64, dstOff int, src uint64, srcOff int, bytes int) error
	// Reduce sets dst[i] = op(dst[i], src[i]) for count elements of dtype
	// ("float32", "float16", "bfloat16"; op "sum", "min", "max"), at
	// dst+dstOff and src+srcOff; ErrNotSupported for a pair it lacks.
	Reduce(op, dtype string, dst uint64, dstOff int, src uint64, srcOff int, count int) error
	// Close frees everything.
	Close() error
}

// Collective is what a collective plugin author implements: collective
// operations that the rank's communicator hands to the plugin instead of
// running its own algorithms, when the plugin accepts them. Each rank has
// its own Collective; they find each other through Handle and Join.
type Collective interface {
	// Handle returns the bytes that the other ranks' Collectives need to
	// reach this one (an address); at most 4096 bytes.
	Handle() []byte
	// Join is called once, with every rank's Handle in rank order, before
	// any operation.
	Join(ctx context.Context, handles [][]byte) error
	// Start starts op, or returns ErrDeclined (at once) to let the
	// communicator run it itself. The decision must depend on op alone,
	// so that every rank makes the same one. send and recv hold the
	// operation's input and output as the communicator describes them in
	// op (they may be the same memory). Start, like the Requests' Test, is
	// called from the SDK's progress loop and must not block.
	Start(op Op, send, recv []byte) (Request, error)
	// Close releases the Collective.
	Close() error
}

// Op describes one collective operation.
type Op struct {
	// Kind is "allreduce", "broadcast", "reduce", "allgather",
	// "reducescatter" or "alltoall".
	Kind string `json:"kind"`
	// DType is the element type: "float32", "float64", "int32", "int64",
	// "uint8", "bfloat16" or "float16".
	DType string `json:"dtype"`
	// RedOp is the reduction for allreduce, reduce and reducescatter:
	// "sum", "prod", "min", "max" or "avg"; "" otherwise.
	RedOp string `json:"redop,omitempty"`
	// Count is the number of elements per rank: of send for allreduce,
	// broadcast, reduce and allgather (whose recv holds Size times as
	// many), of recv for reducescatter (whose send holds Size times as
	// many), and per destination for alltoall.
	Count int `json:"count"`
	// Root is the root rank of broadcast and reduce.
	Root int `json:"root,omitempty"`
	// Rank and Size are the caller's place in the communicator (the world
	// communicator; plugins are not offered operations of split ones).
	Rank int `json:"rank"`
	Size int `json:"size"`
}
