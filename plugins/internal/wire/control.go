package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/gorun/gorun/transport"
)

// CodecName is the gRPC content subtype of gorun's plugin services: their
// messages are Go structs encoded as JSON, so no protobuf compiler is needed
// to write a service or a plugin. go-plugin's own services keep protobuf.
const CodecName = "gorunjson"

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return CodecName }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// CallOption makes a gRPC call use gorun's JSON codec.
func CallOption() grpc.CallOption { return grpc.CallContentSubtype(CodecName) }

// Empty is an empty message.
type Empty struct{}

// InfoReply describes a plugin (plugins.Info, held equal by
// TestPluginAPIStructsEqual).
type InfoReply struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
	Transport   bool   `json:"transport"`
	Collective  bool   `json:"collective"`
	// Memory says the plugin manages device memory (sdk.Memory).
	Memory bool `json:"memory,omitempty"`
}

// InitReq starts the plugin's transport and collective for one rank (Rank
// and Size are -1 outside a job).
type InitReq struct {
	Rank      int               `json:"rank"`
	Size      int               `json:"size"`
	LocalRank int               `json:"local_rank"`
	Iface     string            `json:"iface,omitempty"`
	Options   map[string]string `json:"options,omitempty"`
	// Handoff says that the host adopts the sockets of connections the
	// plugin hands off (sdk.Handoff).
	Handoff bool `json:"handoff,omitempty"`
}

// InitReply says how the plugin will serve the rank. (Plugins built before
// hand-off answer Empty, which reads as the zero InitReply.)
type InitReply struct {
	// Handoff says that every connection's sockets go to the host
	// (ConnReply.Sockets), whose own TCP protocol then moves the data.
	Handoff bool `json:"handoff,omitempty"`
}

// Device is one device a transport can use (sdk.Device and plugins.Device,
// held equal by TestPluginAPIStructsEqual).
type Device struct {
	Name      string `json:"name"`
	Provider  string `json:"provider,omitempty"`
	PCI       string `json:"pci,omitempty"`
	NUMA      int    `json:"numa"`
	SpeedMbps int    `json:"speed_mbps,omitempty"`
	Note      string `json:"note,omitempty"`
}

// DevicesReply lists devices.
type DevicesReply struct {
	Devices []Device `json:"devices"`
}

// ListenReply is a new listener.
type ListenReply struct {
	ID     uint64 `json:"id"`
	Handle []byte `json:"handle"`
}

// IDReq names a listener or connection.
type IDReq struct {
	ID uint64 `json:"id"`
}

// ConnectReq opens a connection.
type ConnectReq struct {
	Handle []byte `json:"handle"`
}

// ConnReply is a new connection.
type ConnReply struct {
	ID   uint64 `json:"id"`
	Peer string `json:"peer"`
	// Sockets, when not 0, is how many sockets the plugin handed off: the
	// host fetches them over the region socket (RegionSockets with ID)
	// and the plugin no longer knows the connection.
	Sockets int `json:"sockets,omitempty"`
}

// HandleReply carries a collective's handle.
type HandleReply struct {
	Handle []byte `json:"handle"`
}

// JoinReq carries every rank's collective handle.
type JoinReq struct {
	Handles [][]byte `json:"handles"`
}

// MemReq is a request about device memory (a SQDev work request): which
// fields count depends on Method ("alloc": Bytes; "free", "export": Ptr;
// "write", "read": Ptr, Off and Ref, the shared memory to copy from or
// to; "import": Handle; "copy": Ptr, Off, Src, SrcOff and Bytes; "reduce":
// those with Count elements, Op and DType).
type MemReq struct {
	Method string `json:"method"`
	Ptr    uint64 `json:"ptr,omitempty"`
	Off    uint64 `json:"off,omitempty"`
	Src    uint64 `json:"src,omitempty"`
	SrcOff uint64 `json:"src_off,omitempty"`
	Bytes  uint64 `json:"bytes,omitempty"`
	Count  uint64 `json:"count,omitempty"`
	Op     string `json:"op,omitempty"`
	DType  string `json:"dtype,omitempty"`
	Ref    Ref    `json:"ref,omitzero"`
	Handle []byte `json:"handle,omitempty"`
}

// MemReply answers a MemReq: a new pointer ("alloc", "import") or a
// handle ("export").
type MemReply struct {
	Ptr    uint64 `json:"ptr,omitempty"`
	Handle []byte `json:"handle,omitempty"`
}

// Control is the plugin's control service. Errors cross as gRPC status
// messages; the data plane never uses it.
type Control interface {
	Info(context.Context, *Empty) (*InfoReply, error)
	Init(context.Context, *InitReq) (*InitReply, error)
	Devices(context.Context, *Empty) (*DevicesReply, error)
	Listen(context.Context, *Empty) (*ListenReply, error)
	Accept(context.Context, *IDReq) (*ConnReply, error)
	Connect(context.Context, *ConnectReq) (*ConnReply, error)
	CloseListener(context.Context, *IDReq) (*Empty, error)
	CollHandle(context.Context, *Empty) (*HandleReply, error)
	CollJoin(context.Context, *JoinReq) (*Empty, error)
}

const service = "gorun.plugin.v1.Control"

func unary[In, Out any](call func(Control, context.Context, *In) (*Out, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(In)
		if err := dec(in); err != nil {
			return nil, err
		}
		out, err := call(srv.(Control), ctx, in)
		if err != nil {
			return nil, toStatus(err)
		}
		return out, nil
	}
}

// toStatus turns an error of the plugin into a gRPC status whose code
// tells the host which sentinel to wrap it in.
func toStatus(err error) error {
	code := codes.Unknown
	switch {
	case errors.Is(err, transport.ErrBadHandle):
		code = codes.InvalidArgument
	case errors.Is(err, transport.ErrClosed):
		code = codes.Canceled
	case errors.Is(err, transport.ErrPeerLost):
		code = codes.Unavailable
	case errors.Is(err, transport.ErrNotSupported):
		code = codes.Unimplemented
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}

// FromStatus turns a control call's error back into one that wraps the
// sentinel its code stands for; errors that are not the plugin's (the
// plugin exited, ctx ended) are returned as they are.
func FromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	var sentinel error
	switch st.Code() {
	case codes.InvalidArgument:
		sentinel = transport.ErrBadHandle
	case codes.Canceled:
		sentinel = transport.ErrClosed
	case codes.Unavailable:
		sentinel = transport.ErrPeerLost
	case codes.Unimplemented:
		sentinel = transport.ErrNotSupported
	case codes.DeadlineExceeded:
		sentinel = context.DeadlineExceeded
	default:
		return errors.New(st.Message())
	}
	return &statusErr{msg: st.Message(), sentinel: sentinel}
}

type statusErr struct {
	msg      string
	sentinel error
}

func (e *statusErr) Error() string { return e.msg }
func (e *statusErr) Unwrap() error { return e.sentinel }

var serviceDesc = grpc.ServiceDesc{
	ServiceName: service,
	HandlerType: (*Control)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Info", Handler: unary(Control.Info)},
		{MethodName: "Init", Handler: unary(Control.Init)},
		{MethodName: "Devices", Handler: unary(Control.Devices)},
		{MethodName: "Listen", Handler: unary(Control.Listen)},
		{MethodName: "Accept", Handler: unary(Control.Accept)},
		{MethodName: "Connect", Handler: unary(Control.Connect)},
		{MethodName: "CloseListener", Handler: unary(Control.CloseListener)},
		{MethodName: "CollHandle", Handler: unary(Control.CollHandle)},
		{MethodName: "CollJoin", Handler: unary(Control.CollJoin)},
	},
}

// Plugin is the go-plugin definition of the control service. The plugin
// sets Impl; the host leaves it nil.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Control
}

// GRPCServer registers the control service.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("plugin: no control implementation")
	}
	s.RegisterService(&serviceDesc, p.Impl)
	return nil
}

// GRPCClient returns a *Client.
func (p *Plugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{conn: c, exited: ctx}, nil
}

// PluginSets is the versioned plugin sets both sides pass to go-plugin:
// one set per API version this build speaks.
func PluginSets(impl Control) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{APIVersion: {PluginName: &Plugin{Impl: impl}}}
}

// Client is the host's end of the control service.
type Client struct {
	conn *grpc.ClientConn
	// exited ends when the plugin process exits (go-plugin cancels it).
	exited context.Context
}

// Exited is closed when the plugin process has exited.
func (c *Client) Exited() <-chan struct{} { return c.exited.Done() }

// Call invokes method with in, decoding the reply into out.
func (c *Client) Call(ctx context.Context, method string, in, out any) error {
	return FromStatus(c.conn.Invoke(ctx, "/"+service+"/"+method, in, out, CallOption()))
}
