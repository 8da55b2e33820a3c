// Package pmixbridge is the service between a gorun agent and its PMIx
// plugin (plugins/pmix): the agent describes a generation's ranks (and the
// jobs they spawn), the plugin runs a PMIx server for them with libpmix and
// hands back each rank's environment; the plugin sends the events only the
// job can answer (fences across hosts, aborts, spawns, name publishing,
// connects, other hosts' data) and the agent answers them from gorun's
// head.
//
// Both ends ship with gorun, so the wire is gorun's own and small: JSON
// values, one per line, over a socket pair that the plugin gets as
// descriptor 3 (wire.go). The agent links neither gRPC nor go-plugin for
// it, whose package initialisation every gorun process paid at start (2 ms
// of `gorun -np 1`'s 16 here); transport plugins, which third parties
// write, keep go-plugin (package plugins).
package pmixbridge

import (
	"context"
	"encoding/hex"
	"strings"
)

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
const ProtocolVersion = 3

// StartRequest describes one generation of the job, or one job that its
// ranks spawned, to the PMIx server on one host: every rank's node (for the
// job's maps) and which ranks run here. A server serves several namespaces
// at once: a generation's and those of the jobs it spawned, each
// registered on every host that runs ranks of any of them, so that they
// can connect.
type StartRequest struct {
	// Nspace names the generation ("gorun.<job>.<gen>") or the spawned
	// job ("gorun.<job>.<gen>.<n>"), unique per job.
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
	// UnivSize is PMIX_UNIV_SIZE (MPI_UNIVERSE_SIZE: the job's slots);
	// below the job's size, the job's size.
	UnivSize int `json:"univ_size,omitempty"`
	// Parent is the process that spawned this job (PMIX_PARENT_ID); nil
	// for a generation.
	Parent *Proc `json:"parent,omitempty"`
	// Remote registers the namespace without starting ranks here: no
	// environment comes back.
	Remote bool `json:"remote,omitempty"`
}

// Proc names a process: a rank of a namespace, or every rank of it
// (Rank Wildcard).
type Proc struct {
	Nspace string `json:"nspace"`
	Rank   int    `json:"rank"`
}

// Wildcard is the Rank of a Proc that stands for every rank of its
// namespace (PMIX_RANK_WILDCARD).
const Wildcard = -1

// StartReply returns each local rank's PMIx environment.
type StartReply struct {
	// Env[i] is the environment to add for the i-th local rank, in rank
	// order (NAME=value entries).
	Env map[int][]string `json:"env"`
}

// The kinds of Event.
const (
	EventFence       = "fence"      // a fence: Data
	EventAbort       = "abort"      // PMIx_Abort: Rank, Status, Msg
	EventSpawn       = "spawn"      // PMIx_Spawn (MPI_Comm_spawn): Rank, Spawn, Info
	EventPublish     = "publish"    // PMIx_Publish: Rank, Info (the names and directives)
	EventLookup      = "lookup"     // PMIx_Lookup: Rank, Keys, Info
	EventUnpublish   = "unpublish"  // PMIx_Unpublish: Rank, Keys, Info
	EventConnect     = "connect"    // PMIx_Connect, once every local participant called it: Procs, Info
	EventDisconnect  = "disconnect" // PMIx_Disconnect, likewise
	EventDirectModex = "dmodex"     // a local client wants the data of Procs[0], which another host's server holds
)

// Event is something the PMIx server needs the job to answer or know.
// A fence is answered with FenceDone; a spawn, publish, lookup,
// unpublish, connect, disconnect or dmodex with Done.
type Event struct {
	// Kind is one of the Event* kinds.
	Kind string `json:"kind"`
	// Nspace is the namespace the event belongs to (its requester's).
	Nspace string `json:"nspace"`
	// ID identifies the request for FenceDone or Done.
	ID uint64 `json:"id,omitempty"`
	// Data is this host's contribution to the fence (opaque PMIx bytes).
	Data []byte `json:"data,omitempty"`
	// Rank is the requester (an abort's, a spawn's, ...); Status and Msg
	// describe an abort.
	Rank   int    `json:"rank,omitempty"`
	Status int    `json:"status,omitempty"`
	Msg    string `json:"msg,omitempty"`
	// Spawn is a spawn's programs.
	Spawn []SpawnApp `json:"spawn,omitempty"`
	// Info are the request's attributes, by PMIx key, as text (see Value).
	Info []KV `json:"info,omitempty"`
	// Keys are a lookup's or an unpublish's names.
	Keys []string `json:"keys,omitempty"`
	// Procs are a connect's or disconnect's processes, or the process
	// whose data a dmodex asks for.
	Procs []Proc `json:"procs,omitempty"`
}

// KV is one PMIx attribute or published name, its value as text: a
// string as it is, a number or boolean in decimal, a process as
// nspace:rank, a byte object as "\x02" and its bytes in hex (Bytes reads
// it); a value of another type is "\x01" and its type's name
// (Unconvertible says so).
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Unconvertible reports whether a KV's value is of a type the plugin does
// not put into text, and which type.
func (kv KV) Unconvertible() (string, bool) {
	t, ok := strings.CutPrefix(kv.Value, "\x01")
	return t, ok
}

// Bytes reads a value that holds a byte object ("\x02" and hex).
func Bytes(v string) ([]byte, bool) {
	h, ok := strings.CutPrefix(v, "\x02")
	if !ok {
		return nil, false
	}
	b, err := hex.DecodeString(h)
	return b, err == nil
}

// SpawnApp is one program of a spawn (a pmix_app_t).
type SpawnApp struct {
	Cmd      string   `json:"cmd"`
	Argv     []string `json:"argv"`          // argv[0] included
	Env      []string `json:"env,omitempty"` // NAME=value pairs to add
	Dir      string   `json:"dir,omitempty"` // "" = the parent's
	MaxProcs int      `json:"maxprocs"`
	Info     []KV     `json:"info,omitempty"` // its attributes (PMIX_HOST, PMIX_WDIR, ...)
}

// Status classes of a Done: how a request ended, which the plugin
// turns into a PMIx status.
const (
	StatusOK           = 0
	StatusError        = 1
	StatusNotFound     = 2
	StatusNotSupported = 3
	StatusTimeout      = 4
	StatusExists       = 5
)

// Done completes a request event (not a fence): its status class, and
// what the request returns.
type Done struct {
	ID     uint64 `json:"id"`
	Kind   string `json:"kind"`
	Status int    `json:"status,omitempty"`
	// Nspace is a spawn's new namespace.
	Nspace string `json:"nspace,omitempty"`
	// Found is a lookup's answer.
	Found []Published `json:"found,omitempty"`
	// Data is a dmodex's answer (opaque PMIx bytes).
	Data []byte `json:"data,omitempty"`
}

// Published is a name found by a lookup: its value, and who published it.
type Published struct {
	Key       string `json:"key"`
	Value     string `json:"value"`
	Publisher Proc   `json:"publisher"`
}

// ModexData is the data of one local process, for another host's server.
type ModexData struct {
	Data []byte `json:"data,omitempty"`
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
	// Stop forgets a generation (or a spawned job).
	Stop(context.Context, *RankQuery) (*Empty, error)
	// Done completes a request event.
	Done(context.Context, *Done) (*Empty, error)
	// Modex returns the data of a local process (a direct modex, for a
	// server on another host).
	Modex(context.Context, *Proc) (*ModexData, error)
}
