package collectives

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log"
	"strconv"
	"sync"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/tcp"
)

// record is what each rank publishes: its host, and for each kind of link
// its address or why it has none. Its JSON is the rendezvous entry.
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
	// Handoff says that the plugin hands its connections' sockets to the
	// rank, whose own TCP protocol moves the data.
	Handoff bool `json:"handoff,omitempty"`
}

// slot returns r's fields for links of kind k: the address its rank
// publishes, nil when it does not listen on k, and why it does not, "" when
// it does or did not try.
func (r *record) slot(k transport.Kind) (addr *[]byte, why *string) {
	switch k {
	case transport.KindTCP:
		return &r.TCP, &r.TCPErr
	case transport.KindSHM:
		return &r.SHM, &r.SHMErr
	}
	return &r.Plugin, &r.PluginErr
}

// numKinds is the number of transport.Kind values: the size of the arrays
// they index.
const numKinds = int(transport.KindPlugin) + 1

// linkEnd is this rank's side of one kind of link.
type linkEnd struct {
	name   string              // the transport's name: "tcp", "shm", or the plugin's
	tr     transport.Transport // nil when this rank has no transport of the kind
	lis    transport.Listener  // nil when it does not listen on the kind
	expect int                 // connections to accept on lis
}

// initState is InitWith's state as its phases go: this rank's end of each
// kind of link, and, from the fence on, what every rank published and the
// kind of link to each peer.
type initState struct {
	s    Setup
	mode transport.Mode
	e    *endpoint
	log  *log.Logger

	ends  [numKinds]linkEnd   // indexed by transport.Kind
	coll  *plugins.Collective // the plugin's collective, when it has one
	rec   record              // what this rank publishes
	recs  []record            // what every rank published, after the fence
	kinds []transport.Kind    // the kind of link to each peer, after plan
}

// newInitState returns InitWith's state before its first phase: each kind
// of link named after its kind, and a record that holds only the host.
func newInitState(s Setup, mode transport.Mode, e *endpoint, logger *log.Logger) *initState {
	st := &initState{s: s, mode: mode, e: e, log: logger, rec: record{Host: s.Host}}
	for k := range st.ends {
		st.ends[k].name = transport.Kind(k).String()
	}
	return st
}

// run connects a world of more than one rank, in InitWith's phases: listen,
// publish (and fence), plan the links, connect (and accept), join the
// plugin. On error the caller closes the endpoint, and with it whatever
// the phases opened.
func (st *initState) run(ctx context.Context, opts *Options) (*Communicator, error) {
	if err := st.listen(ctx); err != nil {
		return nil, err
	}
	if err := st.publish(ctx); err != nil {
		return nil, err
	}
	if err := st.plan(); err != nil {
		return nil, err
	}
	if err := st.connect(ctx); err != nil {
		return nil, err
	}
	st.e.ready(st.s.Host)
	if err := st.joinPlugin(ctx); err != nil {
		return nil, err
	}
	return newWorld(st.e, st.s.Size, pluginChunk(opts, st.recs))
}

// listen opens a transport and a listener of every kind this rank may
// need (transport.Mode.Uses), and records their addresses, or why there is
// none, in the record it publishes: which kind a peer needs is known only
// after the fence, and an idle listener costs one socket. The plugin comes
// first (listenPlugin).
func (st *initState) listen(ctx context.Context) error {
	if st.s.Device != "" {
		if err := st.openDevice(); err != nil {
			return err
		}
	}
	// A plugin's collective serves a world on one host too.
	if st.s.Plugin != "" && (st.mode == transport.ModeAuto || st.mode == transport.ModePlugin) {
		if err := st.listenPlugin(ctx); err != nil {
			return err
		}
	}
	if st.mode.Uses(transport.KindTCP, st.s.Hosts) {
		st.listenOn(ctx, transport.KindTCP, func() (transport.Transport, error) {
			return tcp.New(tcp.Options{Iface: st.s.Iface, Streams: st.s.Streams})
		})
	}
	if st.mode.Uses(transport.KindSHM, st.s.Hosts) {
		st.listenOn(ctx, transport.KindSHM, func() (transport.Transport, error) {
			return shm.New(shm.Options{CMA: st.s.CMA})
		})
	}
	for k, end := range st.ends {
		if end.tr != nil {
			st.e.trs = append(st.e.trs, end.tr)
		}
		if end.lis != nil {
			addr, _ := st.rec.slot(transport.Kind(k))
			*addr = end.lis.Handle()
		}
	}
	return nil
}

// listenOn makes a built-in transport of kind k with open and listens on
// it; a failure is recorded for the peers, not returned.
func (st *initState) listenOn(ctx context.Context, k transport.Kind, open func() (transport.Transport, error)) {
	t, err := open()
	if err == nil {
		st.ends[k].tr = t
		st.ends[k].lis, err = t.Listen(ctx)
	}
	if err != nil {
		_, why := st.rec.slot(k)
		*why = err.Error()
	}
}

// listenPlugin starts the plugin that Setup names, listens on its
// transport and takes its collective's handle, where it has them. A
// plugin that fails is an error; with the TCP fallback, a warning and the
// reason in the record instead.
func (st *initState) listenPlugin(ctx context.Context) error {
	pl, err := openPlugin(st.s, st.s.Plugin, st.log)
	if err == nil {
		err = st.usePlugin(ctx, pl)
	}
	if err == nil {
		return nil
	}
	if st.e.plugin != nil {
		st.e.plugin.Close()
		st.e.plugin = nil
		st.ends[transport.KindPlugin].tr, st.ends[transport.KindPlugin].lis = nil, nil
	}
	if st.s.Fallback != "tcp" {
		return fmt.Errorf("collectives: init: rank %d: %w (gorun --transport-fallback tcp goes on without it)", st.s.Rank, err)
	}
	st.log.Printf("gorun: rank %d: %v; going on over tcp (--transport-fallback tcp)", st.s.Rank, err)
	st.rec.PluginErr = err.Error()
	st.coll, st.rec.Coll, st.rec.HasColl = nil, nil, false
	return nil
}

// openDevice starts the device plugin Setup names (its memory is the
// world's device buffers).
func (st *initState) openDevice() error {
	pl, err := openPlugin(st.s, st.s.Device, st.log)
	if err == nil && !pl.Info().Memory {
		pl.Close()
		err = fmt.Errorf("plugin %s manages no device memory: give it as --plugin, not --device", pl.Name())
	}
	if err != nil {
		return fmt.Errorf("collectives: init: rank %d: device: %w", st.s.Rank, err)
	}
	st.e.device = pl
	return nil
}

// usePlugin makes pl the endpoint's plugin, listens on its transport and
// takes its collective's handle, where it has them.
func (st *initState) usePlugin(ctx context.Context, pl *plugins.Client) error {
	end := &st.ends[transport.KindPlugin]
	end.name = pl.Name()
	st.e.plugin = pl
	if info := pl.Info(); !info.Transport && !info.Collective {
		return fmt.Errorf("plugin %s provides no transport or collective: a device plugin goes in --device (%s), not --plugin", pl.Name(), EnvDevice)
	}
	if pl.Info().Transport {
		t, _ := pl.Transport()
		end.tr = t
		st.rec.Handoff = t.HandsOff()
		var err error
		if end.lis, err = t.Listen(ctx); err != nil {
			return fmt.Errorf("plugin %s: listen: %w", pl.Name(), err)
		}
	}
	if pl.Info().Collective {
		st.coll, _ = pl.Collective()
		var err error
		if st.rec.Coll, err = st.coll.Handle(ctx); err != nil {
			return err
		}
		st.rec.HasColl = true
	}
	return nil
}

// publish puts this rank's record in the store, fences, and reads every
// other rank's record: after it, st.recs and the endpoint's hosts are
// complete.
func (st *initState) publish(ctx context.Context) error {
	s := st.s
	b, _ := json.Marshal(st.rec)
	key := func(r int) string { return s.Key + "." + strconv.Itoa(r) }
	if err := s.KV.Put(key(s.Rank), string(b)); err != nil {
		return fmt.Errorf("collectives: init: rank %d: publishing its addresses: %w", s.Rank, err)
	}
	if err := s.KV.Fence(ctx); err != nil {
		return fmt.Errorf("collectives: init: rank %d: fence: %w", s.Rank, err)
	}
	st.recs = make([]record, s.Size)
	st.recs[s.Rank] = st.rec
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		v, err := s.KV.Get(key(r))
		if err != nil {
			return fmt.Errorf("collectives: init: rank %d's addresses: %w", r, err)
		}
		if err := json.Unmarshal([]byte(v), &st.recs[r]); err != nil {
			return fmt.Errorf("collectives: init: rank %d's addresses %q: %w", r, v, err)
		}
		st.e.hosts[r] = st.recs[r].Host
	}
	return nil
}

// plan picks the kind of link to every peer (transport.Mode.Pick), checks
// that this rank listens on it, and counts the connections to accept of
// each kind; a listener that no peer needs is closed.
func (st *initState) plan() error {
	s := st.s
	st.kinds = make([]transport.Kind, s.Size)
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		k := st.mode.Pick(transport.Pair{
			SameHost: st.e.hosts[r] == s.Host,
			Plugin:   st.rec.Plugin != nil && st.recs[r].Plugin != nil,
		})
		st.kinds[r] = k
		if err := st.checkPlugin(r, k); err != nil {
			return err
		}
		if k == transport.KindPlugin && st.rec.Handoff != st.recs[r].Handoff {
			// Each end would speak another protocol on the sockets.
			yes, no := s.Rank, r
			if !st.rec.Handoff {
				yes, no = r, s.Rank
			}
			return fmt.Errorf("collectives: init: rank %d hands its %s connections off to gorun's TCP and rank %d does not: give every rank the same %s", yes, st.ends[k].name, no, EnvHandoff)
		}
		end := &st.ends[k]
		end.expect++
		if end.lis == nil {
			_, why := st.rec.slot(k)
			return fmt.Errorf("collectives: init: rank %d needs %s to reach rank %d (host %d) but cannot listen on it: %s", s.Rank, end.name, r, st.e.hosts[r], *why)
		}
		st.e.links[r] = &link{name: end.name}
	}
	for k := range st.ends {
		if end := &st.ends[k]; end.lis != nil && end.expect == 0 {
			end.lis.Close()
			end.lis = nil
		}
	}
	return nil
}

// checkPlugin fails the link of kind k to peer r when the job has a plugin
// and no TCP fallback, and the link is TCP where the plugin's transport was
// wanted (in mode plugin, or across hosts), because one end lacks it.
func (st *initState) checkPlugin(r int, k transport.Kind) error {
	s := st.s
	if k != transport.KindTCP || s.Plugin == "" || s.Fallback == "tcp" || (st.mode != transport.ModePlugin && st.e.hosts[r] == s.Host) {
		return nil
	}
	who, why := r, st.recs[r].PluginErr
	if st.rec.Plugin == nil {
		who, why = s.Rank, st.rec.PluginErr
	}
	if why == "" {
		why = "the plugin provides no transport"
	}
	return fmt.Errorf("collectives: init: rank %d has no %s transport to reach rank %d: rank %d: %s", s.Rank, st.ends[transport.KindPlugin].name, r, who, why)
}

// connect opens this rank's connection to every peer (dial) and accepts
// every peer's (accept), all at once, then closes the listeners. It
// returns the first error, once every attempt has ended; the first error
// cancels the others.
func (st *initState) connect(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, 2*st.s.Size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		if err != nil {
			errs <- err
			cancel()
		}
	}
	for r := range st.s.Size {
		if r != st.s.Rank {
			wg.Go(func() { fail(st.dial(ctx, r)) })
		}
	}
	for k := range st.ends {
		for range st.ends[k].expect {
			wg.Go(func() { fail(st.accept(ctx, transport.Kind(k))) })
		}
	}
	wg.Wait()
	for _, end := range st.ends {
		if end.lis != nil {
			end.lis.Close()
		}
	}
	close(errs)
	return <-errs
}

// dial connects to peer r over the kind of link plan picked, and greets it
// with this rank's number.
func (st *initState) dial(ctx context.Context, r int) error {
	s, e := st.s, st.e
	k := st.kinds[r]
	end := &st.ends[k]
	addr, reason := st.recs[r].slot(k)
	if *addr == nil {
		why := *reason
		if why == "" {
			why = "it did not listen on " + end.name + " (is " + EnvTransport + " the same on every rank?)"
		}
		return fmt.Errorf("collectives: init: rank %d (host %d) has no %s address: %s", r, e.hosts[r], end.name, why)
	}
	c, err := end.tr.Connect(ctx, *addr)
	if err != nil {
		return fmt.Errorf("collectives: init: rank %d: connecting to rank %d (host %d) over %s: %w", s.Rank, r, e.hosts[r], end.name, err)
	}
	e.links[r].send = c
	req, err := c.Isend(hello(s.Rank), helloTag, nil)
	if err == nil {
		_, err = req.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("collectives: init: rank %d: greeting rank %d over %s: %w", s.Rank, r, end.name, err)
	}
	return nil
}

// accept takes one connection on the listener of kind k and files it under
// the rank that its first message names.
func (st *initState) accept(ctx context.Context, k transport.Kind) error {
	e, name := st.e, st.ends[k].name
	c, err := st.ends[k].lis.Accept(ctx)
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
	if peer < 0 || peer >= len(e.links) || peer == e.rank || st.kinds[peer] != k {
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

// joinPlugin joins the plugin's collective, when this rank has one (see
// joinCollective), and makes it the endpoint's offloader when every rank
// has one.
func (st *initState) joinPlugin(ctx context.Context) error {
	if st.coll == nil {
		return nil
	}
	if err := joinCollective(ctx, st.s, st.coll, st.recs, st.log); err != nil {
		return err
	}
	if recsHaveColl(st.recs) {
		st.e.offload = st.coll
	}
	return nil
}
