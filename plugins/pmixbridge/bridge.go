// Package pmixbridge is the service between a gorun agent and its PMIx
// plugin (plugins/pmix): the agent describes a generation's ranks, the
// plugin runs a PMIx server for them with libpmix and hands back each rank's
// environment; the plugin sends the events only the job can answer (fences
// across hosts, aborts) and the agent answers them from gorun's store.
//
// Both ends ship with gorun, so the wire is gorun's own and small: JSON
// values, one per line, over a socket pair that the plugin gets as
// descriptor 3 (wire.go). The agent links neither gRPC nor go-plugin for
// it, whose package initialisation every gorun process paid at start (2 ms
// of `gorun -np 1`'s 16 here); transport plugins, which third parties
// write, keep go-plugin (package plugins).
package pmixbridge

import "context"

// Name is the plugin's name in messages.
const Name = "pmix"

// Binary is the file name of the shipped plugin.
const Binary = "gorun-pmix"

// CookieKey and CookieValue are the variable the agent sets in the
// plugin's environment: a gorun-pmix started without it was run by hand,
// and says what it is instead of waiting for an agent.
const (
	CookieKey   = "GORUN_PLUGIN_COOKIE"
	CookieValue = "pmix-bridge"
)

// ProtocolVersion is said in the plugin's hello; it changes whenever a
// message below changes incompatibly, and an agent refuses a plugin that
// says another.
const ProtocolVersion = 2

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
	// AppOf[r] is the index of rank r's program in a job of several
	// (MPMD: its PMIX_APPNUM, MPI_APPNUM); nil: every rank's is 0.
	AppOf []int `json:"app_of,omitempty"`
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

// Server is what the plugin implements. Calls may come concurrently.
type Server interface {
	// Start registers a generation and returns its ranks' environments.
	Start(context.Context, *StartRequest) (*StartReply, error)
	// Events sends events until ctx ends or send fails.
	Events(ctx context.Context, send func(*Event) error) error
	// FenceDone completes a fence.
	FenceDone(context.Context, *FenceDone) (*Empty, error)
	// Rank reports a rank's state.
	Rank(context.Context, *RankQuery) (*RankState, error)
	// Stop forgets a generation.
	Stop(context.Context, *RankQuery) (*Empty, error)
}
