package collectives

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/transport"
)

// Environment variables Init reads, besides the ones gorun gives every
// rank (GORUN_RANK, GORUN_WORLD_SIZE, GORUN_NODE_RANK and the rendezvous
// socket and secret).
const (
	// EnvTransport forces one transport between every pair of ranks:
	// "tcp", or "shm" (a job on one host). Empty or "auto": shared memory
	// inside a host, TCP across hosts.
	EnvTransport = env.CollTransport
	// EnvIface chooses the TCP transport's network interface, in
	// NCCL_SOCKET_IFNAME syntax ("eth", "=eth0", "^docker,lo"). gorun's
	// --iface sets it.
	EnvIface = env.CollIface
	// EnvStreams is the number of TCP streams per connection (1 to
	// tcp.MaxStreams; default tcp.DefaultStreams).
	EnvStreams = env.CollStreams
	// EnvCMA set to 1 has large shared-memory messages read from the
	// sender's memory (process_vm_readv, one copy) instead of going
	// through the ring (two copies, in parallel); see shm.Options.CMA.
	EnvCMA = "GORUN_COLL_CMA"
	// EnvPlugin names a transport or collective plugin (gorun --plugin):
	// its transport replaces TCP between hosts (or between every pair
	// with GORUN_COLL_TRANSPORT=plugin), its collectives run the
	// operations it accepts. A name is looked up as gorun-plugin-<name>
	// in the plugin directories; a path is used as it is.
	EnvPlugin = env.CollPlugin
	// EnvPluginOpts are the plugin's options, "key=value" separated by
	// commas (gorun --plugin-opt, --fabric-provider).
	EnvPluginOpts = env.PluginOpts
	// EnvChunk is the ring algorithms' chunk in bytes (Options.ChunkBytes;
	// default DefaultChunkBytes, PluginChunkBytes in a world of plugin
	// transports). Every rank must be given the same.
	EnvChunk = "GORUN_COLL_CHUNK"
	// EnvFallback set to "tcp" lets a rank whose plugin cannot start go
	// on over TCP instead of failing (gorun --transport-fallback tcp).
	EnvFallback = env.CollFallback
	// EnvHandoff set to "0" keeps a transport plugin on the data path
	// even when it could hand its connections' sockets to the rank
	// (sdk.Handoff); by default the rank adopts them.
	EnvHandoff = env.PluginHandoff
	// EnvDevice names the device plugin (gorun --device cuda): the world's
	// device buffers (Communicator.AllocDevice) are its memory.
	EnvDevice = env.CollDevice
)

// DefaultSetupTimeout bounds InitWith's connection set-up when its
// context has no deadline.
const DefaultSetupTimeout = 2 * time.Minute

// KV is the rendezvous store InitWith exchanges transport addresses
// through: what a rank puts is visible to the others after a Fence that
// all of them call. *rendezvous.Client is one.
type KV interface {
	Put(key, value string) error
	Get(key string) (string, error)
	Fence(ctx context.Context) error
}

// Setup describes the rank that InitWith connects.
type Setup struct {
	// Rank and Size place the rank among the job's.
	Rank, Size int
	// Host is the index of the rank's host: ranks with the same Host talk
	// over shared memory, the others over TCP.
	Host int
	// Hosts is the number of hosts in the world, when known: with 1, no
	// TCP listener is opened (unless Transport is "tcp"). 0 means unknown.
	Hosts int
	// KV is the rendezvous store.
	KV KV
	// Transport forces one transport between every pair: "tcp" or "shm".
	// "" and "auto" choose by host. ParseTransport says what each value
	// means; transport.Mode.Pick applies it to a pair.
	Transport string
	// Iface is the TCP transport's interface choice (see EnvIface).
	Iface string
	// Streams is the number of TCP streams per connection; 0 means
	// tcp.DefaultStreams.
	Streams int
	// CMA has large shared-memory messages read from the sender's memory
	// instead of going through the ring (shm.Options.CMA).
	CMA bool
	// Key prefixes the rendezvous keys; "" means "gorun.coll". Ranks that
	// build several independent worlds give each its own.
	Key string
	// Plugin is a transport or collective plugin's name or path (see
	// EnvPlugin); "" for none. Transport "plugin" uses its transport
	// between every pair.
	Plugin string
	// PluginOptions are passed to the plugin.
	PluginOptions map[string]string
	// Device is a device plugin's name or path (see EnvDevice), whose
	// memory AllocDevice allocates; "" for none.
	Device string
	// NoHandoff keeps the plugin on the data path even when it could hand
	// its connections' sockets to the rank (see EnvHandoff).
	NoHandoff bool
	// Fallback "tcp" goes on over TCP when the plugin cannot start or a
	// peer has none; "" fails instead.
	Fallback string
	// LocalRank is the rank's index on its host, or -1 when unknown.
	LocalRank int
}

// Init returns the world communicator of a Go rank started by gorun: it
// reads the rank, the world size and the host from gorun's environment,
// connects to its agent's rendezvous store, and calls InitWith. Closing the
// communicator closes its connections and says goodbye to the store. A
// rank that also uses the store itself calls InitWith with its own client:
// the agent accepts one connection per rank.
func Init(ctx context.Context, opts *Options) (*Communicator, error) {
	s, err := SetupFromEnv()
	if err != nil {
		return nil, err
	}
	kv, err := rendezvous.DialEnv(ctx)
	if err != nil {
		return nil, fmt.Errorf("collectives: init: %w", err)
	}
	s.KV = kv
	c, err := InitWith(ctx, s, opts)
	if err != nil {
		kv.Close()
		return nil, err
	}
	release := c.release
	c.release = func() {
		release()
		kv.Close()
	}
	return c, nil
}

// SetupFromEnv reads a Setup, without its KV, from the environment gorun
// gives a rank.
func SetupFromEnv() (Setup, error) {
	var s Setup
	num := func(name string, dst *int, need bool) error {
		v := os.Getenv(name)
		if v == "" && !need {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			if v == "" {
				return fmt.Errorf("collectives: init: %s is not set: is this rank started by gorun?", name)
			}
			return fmt.Errorf("collectives: init: %s=%q: not a number", name, v)
		}
		*dst = n
		return nil
	}
	if err := errors.Join(num(rendezvous.EnvRank, &s.Rank, true), num("GORUN_WORLD_SIZE", &s.Size, true),
		num("GORUN_NODE_RANK", &s.Host, false), num("GORUN_NODE_COUNT", &s.Hosts, false), num(EnvStreams, &s.Streams, false)); err != nil {
		return s, err
	}
	s.LocalRank = -1
	if err := num("GORUN_LOCAL_RANK", &s.LocalRank, false); err != nil {
		return s, err
	}
	s.Transport = os.Getenv(EnvTransport)
	s.CMA = os.Getenv(EnvCMA) == "1"
	s.Plugin = os.Getenv(EnvPlugin)
	s.Device = os.Getenv(EnvDevice)
	s.Fallback = os.Getenv(EnvFallback)
	opts, err := env.ParsePluginOpts(os.Getenv(EnvPluginOpts))
	if err != nil {
		return s, fmt.Errorf("collectives: init: %w", err)
	}
	s.PluginOptions = opts
	switch v := os.Getenv(EnvHandoff); v {
	case "", "1":
	case "0":
		s.NoHandoff = true
	default:
		return s, fmt.Errorf("collectives: init: %s=%q: want 0 or 1", EnvHandoff, v)
	}
	s.Iface = os.Getenv(EnvIface)
	if s.Iface == "" && s.Hosts > 1 {
		s.Iface = routeIface(os.Getenv("MASTER_ADDR"))
	}
	return s, nil
}

// InitWith connects this rank to every other rank of the world that s
// describes and returns its communicator. Each rank listens on shared
// memory and TCP, publishes its addresses under s.Key in s.KV, fences,
// connects to every peer (shared memory to the ranks of its host, TCP to
// the others, unless s.Transport says otherwise), and accepts their
// connections. Every rank of the world must call it. Closing the
// communicator closes the connections. A KV that reports progress, as
// *rendezvous.Client does (SetProgress), is given the communicator's
// [Communicator.Progress], so that gorun can ask the rank for it.
func InitWith(ctx context.Context, s Setup, opts *Options) (*Communicator, error) {
	mode, err := checkSetup(s)
	if err != nil {
		return nil, err
	}
	if s.Key == "" {
		s.Key = "gorun.coll"
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultSetupTimeout)
		defer cancel()
	}
	e := &endpoint{rank: s.Rank, hosts: make([]int, s.Size), links: make([]*link, s.Size)}
	e.xfers.Max = 256 // enough for a window of chunks to several peers
	e.hosts[s.Rank] = s.Host
	var c *Communicator
	if s.Size == 1 {
		c, err = newWorld(e, s.Size, opts)
	} else {
		c, err = newInitState(s, mode, e, opts.logger()).run(ctx, opts)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	if r, ok := s.KV.(progressReporter); ok {
		r.SetProgress(c.Progress)
	}
	return c, nil
}

// progressReporter is a KV that reports the rank's Progress to gorun, as
// *rendezvous.Client does.
type progressReporter interface {
	SetProgress(func() rendezvous.Progress)
}

// ParseTransport returns the transport.Mode that a transport setting
// names (Setup.Transport, EnvTransport, gorun bench --transport): "" or
// "auto", "tcp", "shm", or "plugin". Its error quotes the value and says
// what would do; the caller names the setting it came from.
func ParseTransport(name string) (transport.Mode, error) {
	return transport.ParseMode(name)
}

// checkSetup checks what InitWith can check of s alone, and returns the
// transport mode s names. Its errors wrap ErrInvalid.
func checkSetup(s Setup) (transport.Mode, error) {
	if s.Size < 1 || s.Rank < 0 || s.Rank >= s.Size {
		return 0, fmt.Errorf("%w: init: rank %d of %d", ErrInvalid, s.Rank, s.Size)
	}
	if s.KV == nil && s.Size > 1 {
		return 0, fmt.Errorf("%w: init: no rendezvous store", ErrInvalid)
	}
	mode, err := ParseTransport(s.Transport)
	if err != nil {
		return mode, fmt.Errorf("%w: init: transport %w (%s)", ErrInvalid, err, EnvTransport)
	}
	if mode == transport.ModePlugin && s.Plugin == "" {
		return mode, fmt.Errorf("%w: init: transport plugin needs a plugin (%s, gorun --plugin)", ErrInvalid, EnvPlugin)
	}
	switch s.Fallback {
	case "", "tcp":
	default:
		return mode, fmt.Errorf("%w: init: transport fallback %q: want tcp or nothing (%s)", ErrInvalid, s.Fallback, EnvFallback)
	}
	return mode, nil
}

// PluginChunkBytes is the ring chunk of a world whose every rank carries
// its traffic through a plugin transport (unless Options or EnvChunk say
// otherwise).
const PluginChunkBytes = 1 << 20

// pluginEverywhere reports whether every rank listens on a plugin
// transport that keeps the data path (no hand-off): all ranks compute the
// same answer from the same records.
func pluginEverywhere(recs []record) bool {
	for _, r := range recs {
		if r.Plugin == nil || r.Handoff {
			return false
		}
	}
	return true
}

// pluginChunk returns opts, with ChunkBytes PluginChunkBytes when every
// rank listens on a plugin transport that moves the data itself and neither opts nor EnvChunk set a
// chunk. Every message through a plugin costs a few wake-ups of the plugin
// processes: fewer, larger ring chunks (measured: 1.8 to 2.2 times the
// busbw of 128 KiB chunks at 1 to 16 MiB).
func pluginChunk(opts *Options, recs []record) *Options {
	if !pluginEverywhere(recs) || (opts != nil && opts.ChunkBytes != 0) || os.Getenv(EnvChunk) != "" {
		return opts
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.ChunkBytes = PluginChunkBytes
	return &o
}

// newWorld makes the communicator over e and has its Close close e.
func newWorld(e *endpoint, size int, opts *Options) (*Communicator, error) {
	c, err := New(e, e.rank, size, opts)
	if err != nil {
		return nil, err
	}
	c.release = e.close
	c.transports = describe(e)
	c.offload = e.offload
	c.arena.shared = e.plugin != nil
	if e.device != nil {
		c.device, _ = e.device.Memory()
	}
	return c, nil
}

// describe says which transports e uses, as "shm+tcp".
func describe(e *endpoint) string {
	seen := map[string]bool{}
	var names []string
	for _, l := range e.links {
		if l != nil && !seen[l.name] {
			seen[l.name] = true
			names = append(names, l.name)
		}
	}
	if len(names) == 0 {
		return "self"
	}
	if len(names) == 2 && names[1] == "shm" {
		names[0], names[1] = names[1], names[0] // shared memory first: "shm+tcp"
	}
	return strings.Join(names, "+")
}

// routeIface returns, as an exact interface choice ("=eth1"), the
// interface this host reaches addr through (rank 0's host, MASTER_ADDR),
// found by the routing table alone: no packet is sent. It returns "" when
// addr is empty or not routable, leaving the choice to the transport.
func routeIface(addr string) string {
	if addr == "" {
		return ""
	}
	c, err := net.Dial("udp", net.JoinHostPort(addr, "9"))
	if err != nil {
		return ""
	}
	local := c.LocalAddr().(*net.UDPAddr).IP
	c.Close()
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(local) {
				return "=" + i.Name
			}
		}
	}
	return ""
}
