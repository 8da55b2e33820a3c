// Package pmixbridge defines the service between a gorun agent and its PMIx
// plugin (plugins/pmix): the agent describes a generation's ranks, the
// plugin runs a PMIx server for them with libpmix and hands back each rank's
// environment; the plugin streams the events only the job can answer
// (fences across hosts, aborts) and the agent answers them from gorun's
// store. Messages are Go structs on gRPC with gorun's JSON codec.
package pmixbridge

import (
	"context"
	"fmt"
	"io"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gorun/gorun/plugins"
)

// Name is the plugin's name in its plugin set and in messages.
const Name = "pmix"

// Binary is the file name of the shipped plugin.
const Binary = "gorun-pmix"

// Handshake is shared by the agent and the plugin. ProtocolVersion changes
// whenever a message below changes incompatibly.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "GORUN_PLUGIN_COOKIE",
	MagicCookieValue: "pmix-bridge",
}

// StartRequest describes one generation of the job to the PMIx server on one
// host: every rank's node (for the job's maps) and which ranks run here.
type StartRequest struct {
	// Nspace names the generation ("gorun.<job>.<gen>"), unique per job.
	Nspace string `json:"nspace"`
	// Hosts are the job's node names in node order.
	Hosts []string `json:"hosts"`
	// NodeOf[r] is the node index of rank r; len(NodeOf) is the job size.
	NodeOf []int `json:"node_of"`
	// Node is this host's node index.
	Node int `json:"node"`
	// UID and GID own the ranks (the PMIx server checks its clients' peer
	// credentials against them).
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// StartReply returns each local rank's PMIx environment.
type StartReply struct {
	// Env[i] is the environment to add for the i-th local rank, in rank
	// order (NAME=value entries).
	Env map[int][]string `json:"env"`
}

// Event is something the PMIx server needs the job to answer or know.
type Event struct {
	// Kind is "fence" or "abort".
	Kind string `json:"kind"`
	// Nspace is the generation the event belongs to.
	Nspace string `json:"nspace"`
	// ID identifies a fence for FenceDone.
	ID uint64 `json:"id,omitempty"`
	// Data is this host's contribution to the fence (opaque PMIx bytes).
	Data []byte `json:"data,omitempty"`
	// Rank, Status and Msg describe an abort.
	Rank   int    `json:"rank,omitempty"`
	Status int    `json:"status,omitempty"`
	Msg    string `json:"msg,omitempty"`
}

// FenceDone completes a fence with every host's contribution, concatenated
// in node order, or with an error.
type FenceDone struct {
	ID   uint64 `json:"id"`
	Data []byte `json:"data,omitempty"`
	Err  string `json:"err,omitempty"`
}

// RankQuery asks about one rank of a generation.
type RankQuery struct {
	Nspace string `json:"nspace"`
	Rank   int    `json:"rank"`
}

// RankState says how far a rank got with PMIx.
type RankState struct {
	Connected bool `json:"connected"` // it called PMIx_Init (MPI_Init)
	Finalized bool `json:"finalized"` // it called PMIx_Finalize (MPI_Finalize)
}

// Empty is an empty message.
type Empty struct{}

// Server is what the plugin implements.
type Server interface {
	// Start registers a generation and returns its ranks' environments.
	Start(context.Context, *StartRequest) (*StartReply, error)
	// Events streams events until ctx ends.
	Events(ctx context.Context, send func(*Event) error) error
	// FenceDone completes a fence.
	FenceDone(context.Context, *FenceDone) (*Empty, error)
	// Rank reports a rank's state.
	Rank(context.Context, *RankQuery) (*RankState, error)
	// Stop forgets a generation.
	Stop(context.Context, *RankQuery) (*Empty, error)
}

const service = "gorun.pmix.v1.Bridge"

func unary[In, Out any](call func(Server, context.Context, *In) (*Out, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(In)
		if err := dec(in); err != nil {
			return nil, err
		}
		return call(srv.(Server), ctx, in)
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: service,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Start", Handler: unary(Server.Start)},
		{MethodName: "FenceDone", Handler: unary(Server.FenceDone)},
		{MethodName: "Rank", Handler: unary(Server.Rank)},
		{MethodName: "Stop", Handler: unary(Server.Stop)},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Events",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			var in Empty
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			return srv.(Server).Events(stream.Context(), func(e *Event) error { return stream.SendMsg(e) })
		},
	}},
}

// Plugin is the go-plugin definition of the bridge. The plugin sets Impl;
// the agent leaves it nil.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Server
}

// GRPCServer registers the bridge service.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("pmixbridge: no server implementation")
	}
	s.RegisterService(&serviceDesc, p.Impl)
	return nil
}

// GRPCClient returns a *Client.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{conn: c}, nil
}

// PluginSet is the set both sides pass to go-plugin.
func PluginSet(impl Server) plugin.PluginSet {
	return plugin.PluginSet{Name: &Plugin{Impl: impl}}
}

// Client is the agent's end of the bridge.
type Client struct{ conn *grpc.ClientConn }

func (c *Client) call(ctx context.Context, method string, in, out any) error {
	return c.conn.Invoke(ctx, "/"+service+"/"+method, in, out, plugins.CallOption())
}

// Start registers a generation.
func (c *Client) Start(ctx context.Context, r *StartRequest) (*StartReply, error) {
	out := new(StartReply)
	return out, c.call(ctx, "Start", r, out)
}

// FenceDone completes a fence.
func (c *Client) FenceDone(ctx context.Context, r *FenceDone) error {
	return c.call(ctx, "FenceDone", r, new(Empty))
}

// Rank asks for a rank's state.
func (c *Client) Rank(ctx context.Context, nspace string, rank int) (*RankState, error) {
	out := new(RankState)
	return out, c.call(ctx, "Rank", &RankQuery{Nspace: nspace, Rank: rank}, out)
}

// Stop forgets a generation.
func (c *Client) Stop(ctx context.Context, nspace string) error {
	return c.call(ctx, "Stop", &RankQuery{Nspace: nspace}, new(Empty))
}

// Events calls on for each event until ctx ends or the stream breaks; it
// returns nil when ctx ended.
func (c *Client) Events(ctx context.Context, on func(*Event)) error {
	st, err := c.conn.NewStream(ctx, &serviceDesc.Streams[0], "/"+service+"/Events", plugins.CallOption())
	if err != nil {
		return err
	}
	if err := st.SendMsg(&Empty{}); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		e := new(Event)
		if err := st.RecvMsg(e); err != nil {
			if err == io.EOF || ctx.Err() != nil {
				return nil
			}
			return err
		}
		on(e)
	}
}
