package collectives

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/tcp"
)

// Environment variables Init reads, besides the ones gorun gives every
// rank (GORUN_RANK, GORUN_WORLD_SIZE, GORUN_NODE_RANK and the rendezvous
// socket and secret).
const (
	// EnvTransport forces one transport between every pair of ranks:
	// "tcp", or "shm" (a job on one host). Empty or "auto": shared memory
	// inside a host, TCP across hosts.
	EnvTransport = "GORUN_COLL_TRANSPORT"
	// EnvIface chooses the TCP transport's network interface, in
	// NCCL_SOCKET_IFNAME syntax ("eth", "=eth0", "^docker,lo"). gorun's
	// --iface sets it.
	EnvIface = env.CollIface
	// EnvStreams is the number of TCP streams per connection (1 to
	// tcp.MaxStreams; default tcp.DefaultStreams).
	EnvStreams = "GORUN_COLL_STREAMS"
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
	// "" and "auto" choose by host.
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
	// Fallback "tcp" goes on over TCP when the plugin cannot start or a
	// peer has none; "" fails instead.
	Fallback string
	// LocalRank is the rank's index on its host, or -1 when unknown.
	LocalRank int
}

// record is what each rank publishes.
type record struct {
	Host      int    `json:"host"`
	TCP       []byte `json:"tcp,omitempty"`
	SHM       []byte `json:"shm,omitempty"`
	Plugin    []byte `json:"plugin,omitempty"`
	TCPErr    string `json:"tcp_err,omitempty"`
	SHMErr    string `json:"shm_err,omitempty"`
	PluginErr string `json:"plugin_err,omitempty"`
	// Coll is the handle of the plugin's collective, when it has one.
	Coll    []byte `json:"coll,omitempty"`
	HasColl bool   `json:"has_coll,omitempty"`
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
	s.Fallback = os.Getenv(EnvFallback)
	opts, err := env.ParsePluginOpts(os.Getenv(EnvPluginOpts))
	if err != nil {
		return s, fmt.Errorf("collectives: init: %w", err)
	}
	s.PluginOptions = opts
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
// communicator closes the connections.
func InitWith(ctx context.Context, s Setup, opts *Options) (*Communicator, error) {
	if s.Size < 1 || s.Rank < 0 || s.Rank >= s.Size {
		return nil, fmt.Errorf("%w: init: rank %d of %d", ErrInvalid, s.Rank, s.Size)
	}
	if s.KV == nil && s.Size > 1 {
		return nil, fmt.Errorf("%w: init: no rendezvous store", ErrInvalid)
	}
	switch s.Transport {
	case "", "auto", "tcp", "shm":
	case "plugin":
		if s.Plugin == "" {
			return nil, fmt.Errorf("%w: init: transport plugin needs a plugin (%s, gorun --plugin)", ErrInvalid, EnvPlugin)
		}
	default:
		return nil, fmt.Errorf("%w: init: transport %q: want auto, tcp, shm or plugin (%s)", ErrInvalid, s.Transport, EnvTransport)
	}
	switch s.Fallback {
	case "", "tcp":
	default:
		return nil, fmt.Errorf("%w: init: transport fallback %q: want tcp or nothing (%s)", ErrInvalid, s.Fallback, EnvFallback)
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
	e.hosts[s.Rank] = s.Host
	if s.Size == 1 {
		return newWorld(e, s.Size, opts)
	}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()

	// Listen on every kind this rank may need: which one a peer needs is
	// known only after the fence, and an idle listener costs one socket.
	rec := record{Host: s.Host}
	var lis [3]transport.Listener // tcp, shm, plugin
	var trs [3]transport.Transport
	names := [3]string{"tcp", "shm", "plugin"}
	var coll *plugins.Collective
	if s.Plugin != "" && s.Transport != "tcp" && s.Transport != "shm" {
		pl, err := openPlugin(s)
		if err == nil {
			names[2] = pl.Name()
			e.plugin = pl
			if pl.Info().Transport {
				t, _ := pl.Transport()
				trs[2] = t
				if lis[2], err = t.Listen(ctx); err != nil {
					err = fmt.Errorf("plugin %s: listen: %w", pl.Name(), err)
				}
			}
			if err == nil && pl.Info().Collective {
				coll, _ = pl.Collective()
				if rec.Coll, err = coll.Handle(ctx); err == nil {
					rec.HasColl = true
				}
			}
		}
		if err != nil {
			if e.plugin != nil {
				e.plugin.Close()
				e.plugin, trs[2], lis[2] = nil, nil, nil
			}
			if s.Fallback != "tcp" {
				return nil, fmt.Errorf("collectives: init: rank %d: %w (gorun --transport-fallback tcp goes on without it)", s.Rank, err)
			}
			fmt.Fprintf(os.Stderr, "gorun: rank %d: %v; going on over tcp (--transport-fallback tcp)\n", s.Rank, err)
			rec.PluginErr = err.Error()
			coll, rec.Coll, rec.HasColl = nil, nil, false
		}
	}
	if s.Transport == "tcp" || (s.Transport != "shm" && (s.Hosts != 1 || s.Transport == "plugin")) {
		t, err := tcp.New(tcp.Options{Iface: s.Iface, Streams: s.Streams})
		if err == nil {
			trs[0] = t
			lis[0], err = t.Listen(ctx)
		}
		if err != nil {
			rec.TCPErr = err.Error()
		}
	}
	if s.Transport != "tcp" && s.Transport != "plugin" {
		t, err := shm.New(shm.Options{CMA: s.CMA})
		if err == nil {
			trs[1] = t
			lis[1], err = t.Listen(ctx)
		}
		if err != nil {
			rec.SHMErr = err.Error()
		}
	}
	for _, t := range trs {
		if t != nil {
			e.trs = append(e.trs, t)
		}
	}
	if lis[0] != nil {
		rec.TCP = lis[0].Handle()
	}
	if lis[1] != nil {
		rec.SHM = lis[1].Handle()
	}
	if lis[2] != nil {
		rec.Plugin = lis[2].Handle()
	}
	b, _ := json.Marshal(rec)
	key := func(r int) string { return s.Key + "." + strconv.Itoa(r) }
	if err := s.KV.Put(key(s.Rank), string(b)); err != nil {
		return nil, fmt.Errorf("collectives: init: rank %d: publishing its addresses: %w", s.Rank, err)
	}
	if err := s.KV.Fence(ctx); err != nil {
		return nil, fmt.Errorf("collectives: init: rank %d: fence: %w", s.Rank, err)
	}
	recs := make([]record, s.Size)
	recs[s.Rank] = rec
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		v, err := s.KV.Get(key(r))
		if err != nil {
			return nil, fmt.Errorf("collectives: init: rank %d's addresses: %w", r, err)
		}
		if err := json.Unmarshal([]byte(v), &recs[r]); err != nil {
			return nil, fmt.Errorf("collectives: init: rank %d's addresses %q: %w", r, v, err)
		}
		e.hosts[r] = recs[r].Host
	}

	// kind says which transport a pair uses: 0 tcp, 1 shm, 2 the plugin's
	// (where both ends have it; TCP otherwise, which only a fallback
	// allows).
	kind := func(peer int) int {
		plugin := rec.Plugin != nil && recs[peer].Plugin != nil
		switch {
		case s.Transport == "tcp":
			return 0
		case s.Transport == "shm":
			return 1
		case s.Transport == "plugin" && plugin:
			return 2
		case s.Transport == "plugin":
			return 0
		case e.hosts[peer] == s.Host:
			return 1
		case plugin:
			return 2
		}
		return 0
	}
	errsOf := func(r record) [3]string { return [3]string{r.TCPErr, r.SHMErr, r.PluginErr} }
	expect := [3]int{}
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		k := kind(r)
		if k == 0 && s.Plugin != "" && s.Fallback != "tcp" && (s.Transport == "plugin" || e.hosts[r] != s.Host) {
			who, why := r, recs[r].PluginErr
			if rec.Plugin == nil {
				who, why = s.Rank, rec.PluginErr
			}
			if why == "" {
				why = "the plugin provides no transport"
			}
			return nil, fmt.Errorf("collectives: init: rank %d has no %s transport to reach rank %d: rank %d: %s", s.Rank, names[2], r, who, why)
		}
		expect[k]++
		if lis[k] == nil {
			return nil, fmt.Errorf("collectives: init: rank %d needs %s to reach rank %d (host %d) but cannot listen on it: %s", s.Rank, names[k], r, e.hosts[r], errsOf(rec)[k])
		}
		e.links[r] = &link{name: names[k]}
	}
	for k := range lis {
		if lis[k] != nil && expect[k] == 0 {
			lis[k].Close()
			lis[k] = nil
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 2*s.Size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) { errs <- err; cancel() }
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := kind(r)
			h := [3][]byte{recs[r].TCP, recs[r].SHM, recs[r].Plugin}[k]
			if h == nil {
				why := errsOf(recs[r])[k]
				if why == "" {
					why = "it did not listen on " + names[k] + " (is " + EnvTransport + " the same on every rank?)"
				}
				fail(fmt.Errorf("collectives: init: rank %d (host %d) has no %s address: %s", r, e.hosts[r], names[k], why))
				return
			}
			c, err := trs[k].Connect(ctx, h)
			if err != nil {
				fail(fmt.Errorf("collectives: init: rank %d: connecting to rank %d (host %d) over %s: %w", s.Rank, r, e.hosts[r], names[k], err))
				return
			}
			e.links[r].send = c
			req, err := c.Isend(hello(s.Rank), helloTag, nil)
			if err == nil {
				_, err = req.Wait(ctx)
			}
			if err != nil {
				fail(fmt.Errorf("collectives: init: rank %d: greeting rank %d over %s: %w", s.Rank, r, names[k], err))
			}
		}()
	}
	for k := range lis {
		for range expect[k] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := accept(ctx, lis[k], e, kind, k, names[k]); err != nil {
					fail(err)
				}
			}()
		}
	}
	wg.Wait()
	for _, l := range lis {
		if l != nil {
			l.Close()
		}
	}
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	local := 0
	for _, h := range e.hosts {
		if h == s.Host {
			local++
		}
	}
	e.crowded = local > runtime.NumCPU()
	for _, l := range e.links {
		if l == nil {
			continue
		}
		for _, c := range []any{l.send, l.recv} {
			if p, ok := c.(poller); ok {
				e.pollers = append(e.pollers, p)
			}
		}
	}
	if coll != nil {
		if err := joinCollective(ctx, s, coll, recs); err != nil {
			return nil, err
		}
		if recsHaveColl(recs) {
			e.offload = coll
		}
	}
	if pluginEverywhere(recs) && (opts == nil || opts.ChunkBytes == 0) && os.Getenv(EnvChunk) == "" {
		// Every message through a plugin costs a few wake-ups of the
		// plugin processes: fewer, larger ring chunks (measured: 1.8 to
		// 2.2 times the busbw of 128 KiB chunks at 1 to 16 MiB).
		o := Options{}
		if opts != nil {
			o = *opts
		}
		o.ChunkBytes = PluginChunkBytes
		opts = &o
	}
	c, err := newWorld(e, s.Size, opts)
	if err == nil {
		ok = true
	}
	return c, err
}

// PluginChunkBytes is the ring chunk of a world whose every rank carries
// its traffic through a plugin transport (unless Options or EnvChunk say
// otherwise).
const PluginChunkBytes = 1 << 20

// pluginEverywhere reports whether every rank listens on a plugin
// transport: all ranks compute the same answer from the same records.
func pluginEverywhere(recs []record) bool {
	for _, r := range recs {
		if r.Plugin == nil {
			return false
		}
	}
	return true
}

// accept takes one connection from l and files it under the rank that its
// first message names.
func accept(ctx context.Context, l transport.Listener, e *endpoint, kind func(int) int, k int, name string) error {
	c, err := l.Accept(ctx)
	if err != nil {
		return fmt.Errorf("collectives: init: rank %d: accepting over %s: %w", e.rank, name, err)
	}
	buf := make([]byte, 4)
	req, err := c.Irecv(buf, helloTag, nil)
	var n int
	if err == nil {
		n, err = req.Wait(ctx)
	}
	if err != nil || n != 4 {
		c.Close()
		return fmt.Errorf("collectives: init: rank %d: reading who connected from %s over %s: %v", e.rank, c.Peer(), name, err)
	}
	peer := int(binary.LittleEndian.Uint32(buf))
	if peer < 0 || peer >= len(e.links) || peer == e.rank || kind(peer) != k {
		c.Close()
		return fmt.Errorf("collectives: init: rank %d: a connection over %s from %s says it is rank %d", e.rank, name, c.Peer(), peer)
	}
	lk := e.links[peer]
	lk.rmu.Lock()
	defer lk.rmu.Unlock()
	if lk.recv != nil {
		c.Close()
		return fmt.Errorf("collectives: init: rank %d: rank %d connected twice", e.rank, peer)
	}
	lk.recv = c
	return nil
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
