//go:build cgo

package main

/*
#cgo pkg-config: pmix
#include <stdlib.h>
#include <pmix_common.h>
#include "pmixsrv.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/gorun/gorun/plugins/pmixbridge"
)

// server is the bridge over libpmix's server API. libpmix calls back on its
// own thread; the callbacks below queue events that Events streams.
type server struct {
	mu     sync.Mutex
	events chan *pmixbridge.Event
	ranks  map[string]map[int]*pmixbridge.RankState // nspace -> rank -> state
	fences map[uint64]bool                          // outstanding fence ops
	ops    map[uint64]string                        // outstanding request ops, by kind
	apps   map[uint64][]pmixbridge.SpawnApp         // a spawn's programs, as libpmix hands them over

	initDone chan struct{} // closed when libpmix's server is up (or failed)
	initErr  error
}

var srv = &server{
	events:   make(chan *pmixbridge.Event, 1024),
	ranks:    map[string]map[int]*pmixbridge.RankState{},
	fences:   map[uint64]bool{},
	ops:      map[uint64]string{},
	apps:     map[uint64][]pmixbridge.SpawnApp{},
	initDone: make(chan struct{}),
}

// startInit starts libpmix's server at once, while the hello goes to the
// agent and its first call comes: it takes tens of milliseconds (it reads
// the node's topology). Its directory is the private TMPDIR the agent made
// for it.
func (s *server) startInit() {
	go func() {
		defer close(s.initDone)
		host, _ := os.Hostname()
		errBuf := make([]C.char, 512)
		cdir, chost := C.CString(os.TempDir()), C.CString(host)
		defer C.free(unsafe.Pointer(cdir))
		defer C.free(unsafe.Pointer(chost))
		if C.gorun_init(cdir, chost, &errBuf[0], C.size_t(len(errBuf))) != 0 {
			s.initErr = cerr(errBuf)
		}
	}()
}

func (s *server) waitInit() error {
	<-s.initDone
	return s.initErr
}

func cerr(buf []C.char) error { return errors.New(C.GoString(&buf[0])) }

func (s *server) Start(_ context.Context, r *pmixbridge.StartRequest) (*pmixbridge.StartReply, error) {
	size := len(r.NodeOf)
	if size == 0 || len(r.Hosts) == 0 || r.Node < 0 || r.Node >= len(r.Hosts) {
		return nil, fmt.Errorf("pmix: bad start request: %d ranks, %d hosts, node %d", size, len(r.Hosts), r.Node)
	}
	if err := s.waitInit(); err != nil {
		return nil, err
	}
	errBuf := make([]C.char, 512)
	// s.mu is not held across the library's calls: they wait for its
	// progress thread, whose callbacks into Go (the clients of the
	// namespaces already served: connects, fences, requests) take it.
	// The namespace's nodes are those that run its ranks (a spawned job
	// may run on some of the job's hosts only): libpmix refuses a node
	// with no rank in a namespace's maps.
	r = compactNodes(r)
	// Every array handed to C lives in C memory (cgo's pointer rules).
	nn := len(r.Hosts)
	hosts := (*[1 << 28]*C.char)(C.malloc(C.size_t(nn) * C.size_t(unsafe.Sizeof(uintptr(0)))))[:nn:nn]
	nodeOf := (*[1 << 28]C.uint32_t)(C.malloc(C.size_t(size) * 4))[:size:size]
	localOf := (*[1 << 28]C.uint16_t)(C.malloc(C.size_t(size) * 2))[:size:size]
	defer func() {
		for _, h := range hosts {
			C.free(unsafe.Pointer(h))
		}
		C.free(unsafe.Pointer(&hosts[0]))
		C.free(unsafe.Pointer(&nodeOf[0]))
		C.free(unsafe.Pointer(&localOf[0]))
	}()
	for i, h := range r.Hosts {
		hosts[i] = C.CString(h)
	}
	count := make([]int, nn)
	var local []int
	for rank, n := range r.NodeOf {
		if n < 0 || n >= nn {
			return nil, fmt.Errorf("pmix: rank %d on node %d of %d", rank, n, nn)
		}
		nodeOf[rank] = C.uint32_t(n)
		localOf[rank] = C.uint16_t(count[n])
		count[n]++
		if n == r.Node {
			local = append(local, rank)
		}
	}
	var appOf *C.uint32_t // MPMD: each rank's program; NULL: all 0
	if len(r.AppOf) > 0 {
		if len(r.AppOf) != size {
			return nil, fmt.Errorf("pmix: bad start request: %d ranks, %d app numbers", size, len(r.AppOf))
		}
		apps := (*[1 << 28]C.uint32_t)(C.malloc(C.size_t(size) * 4))[:size:size]
		defer C.free(unsafe.Pointer(&apps[0]))
		for rank, k := range r.AppOf {
			apps[rank] = C.uint32_t(k)
		}
		appOf = &apps[0]
	}
	ns := C.CString(r.Nspace)
	defer C.free(unsafe.Pointer(ns))
	var parentNs *C.char
	parentRank := C.uint32_t(0)
	if r.Parent != nil {
		parentNs = C.CString(r.Parent.Nspace)
		defer C.free(unsafe.Pointer(parentNs))
		parentRank = C.uint32_t(r.Parent.Rank)
	}
	if C.gorun_register(ns, C.uint32_t(size), C.uint32_t(nn), &hosts[0], &nodeOf[0], &localOf[0], appOf,
		C.uint32_t(uint32(r.Node)), C.uint32_t(r.UnivSize), parentNs, parentRank, &errBuf[0], C.size_t(len(errBuf))) != 0 {
		return nil, cerr(errBuf)
	}
	states := map[int]*pmixbridge.RankState{}
	reply := &pmixbridge.StartReply{Env: map[int][]string{}}
	defer func() {
		// Its ranks start once the reply is back: before any connects.
		s.mu.Lock()
		s.ranks[r.Nspace] = states
		s.mu.Unlock()
	}()
	if r.Remote {
		return reply, nil
	}
	for _, rank := range local {
		var env **C.char
		if C.gorun_client(ns, C.uint32_t(rank), C.uint32_t(r.UID), C.uint32_t(r.GID), &env,
			&errBuf[0], C.size_t(len(errBuf))) != 0 {
			return nil, fmt.Errorf("rank %d: %w", rank, cerr(errBuf))
		}
		var kv []string
		for p := env; *p != nil; p = (**C.char)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(p))) {
			kv = append(kv, C.GoString(*p))
		}
		C.gorun_free_env(env)
		reply.Env[rank] = kv
		states[rank] = &pmixbridge.RankState{}
	}
	return reply, nil
}

func (s *server) Events(ctx context.Context, send func(*pmixbridge.Event) error) error {
	for {
		select {
		case e := <-s.events:
			if err := send(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *server) FenceDone(_ context.Context, d *pmixbridge.FenceDone) (*pmixbridge.Empty, error) {
	s.mu.Lock()
	ok := s.fences[d.ID]
	delete(s.fences, d.ID)
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("pmix: no fence %d", d.ID)
	}
	var p *C.char
	if len(d.Data) > 0 {
		p = (*C.char)(C.CBytes(d.Data))
		defer C.free(unsafe.Pointer(p))
	}
	good := C.int(1)
	if d.Err != "" {
		good = 0
	}
	C.gorun_fence_done(C.uintptr_t(d.ID), good, p, C.size_t(len(d.Data)))
	return &pmixbridge.Empty{}, nil
}

func (s *server) Rank(_ context.Context, q *pmixbridge.RankQuery) (*pmixbridge.RankState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ranks[q.Nspace][q.Rank]
	if st == nil {
		return nil, fmt.Errorf("pmix: rank %d of %s is not registered here", q.Rank, q.Nspace)
	}
	c := *st
	return &c, nil
}

func (s *server) Stop(_ context.Context, q *pmixbridge.RankQuery) (*pmixbridge.Empty, error) {
	s.mu.Lock()
	_, known := s.ranks[q.Nspace]
	delete(s.ranks, q.Nspace)
	s.mu.Unlock()
	if known {
		ns := C.CString(q.Nspace)
		C.gorun_deregister(ns)
		C.free(unsafe.Pointer(ns))
	}
	return &pmixbridge.Empty{}, nil
}

// Done completes a request: a spawn with its namespace, a lookup with
// what it found, a dmodex with the process's data, the others with their
// status alone.
func (s *server) Done(_ context.Context, d *pmixbridge.Done) (*pmixbridge.Empty, error) {
	s.mu.Lock()
	kind, ok := s.ops[d.ID]
	delete(s.ops, d.ID)
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("pmix: no request %d", d.ID)
	}
	op, class := C.uintptr_t(d.ID), C.int(d.Status)
	switch kind {
	case pmixbridge.EventLookup:
		n := len(d.Found)
		keys, vals, nss := cstrs(n), cstrs(n), cstrs(n)
		defer freeStrs(keys)
		defer freeStrs(vals)
		defer freeStrs(nss)
		m := C.size_t(max(n, 1))
		rawRanks, rawLens, rawBytes := C.calloc(m, 4), C.calloc(m, C.size_t(unsafe.Sizeof(C.size_t(0)))), C.calloc(m, C.size_t(unsafe.Sizeof(C.int(0))))
		defer C.free(rawRanks)
		defer C.free(rawLens)
		defer C.free(rawBytes)
		ranks := unsafe.Slice((*C.uint32_t)(rawRanks), int(m))
		lens := unsafe.Slice((*C.size_t)(rawLens), int(m))
		bytes := unsafe.Slice((*C.int)(rawBytes), int(m))
		for i, p := range d.Found {
			v := []byte(p.Value)
			bytes[i] = 0
			if b, ok := pmixbridge.Bytes(p.Value); ok {
				v, bytes[i] = b, 1
			}
			keys[i], vals[i], nss[i] = C.CString(p.Key), (*C.char)(C.CBytes(append(v, 0))), C.CString(p.Publisher.Nspace)
			lens[i] = C.size_t(len(v))
			ranks[i] = C.uint32_t(uint32(p.Publisher.Rank))
		}
		C.gorun_lookup_done(op, class, C.size_t(n), &keys[0], &vals[0], &lens[0], &bytes[0], &nss[0], &ranks[0])
	case pmixbridge.EventDirectModex:
		var p *C.char
		if len(d.Data) > 0 {
			p = (*C.char)(C.CBytes(d.Data))
			defer C.free(unsafe.Pointer(p))
		}
		C.gorun_modex_done(op, class, p, C.size_t(len(d.Data)))
	default:
		ns := C.CString(d.Nspace)
		defer C.free(unsafe.Pointer(ns))
		C.gorun_op_done(op, C.int(kindCode[kind]), class, ns)
	}
	return &pmixbridge.Empty{}, nil
}

// Modex returns the data a local process committed, for another host's
// server (which asked its host for it: a direct modex).
func (s *server) Modex(_ context.Context, p *pmixbridge.Proc) (*pmixbridge.ModexData, error) {
	errBuf := make([]C.char, 512)
	ns := C.CString(p.Nspace)
	defer C.free(unsafe.Pointer(ns))
	var data *C.char
	var n C.size_t
	if C.gorun_dmodex(ns, C.uint32_t(uint32(p.Rank)), &data, &n, &errBuf[0], C.size_t(len(errBuf))) != 0 {
		return nil, fmt.Errorf("rank %d of %s: %w", p.Rank, p.Nspace, cerr(errBuf))
	}
	defer C.free(unsafe.Pointer(data))
	return &pmixbridge.ModexData{Data: C.GoBytes(unsafe.Pointer(data), C.int(n))}, nil
}

// The request kinds of pmixsrv.h, by event kind.
var kindCode = map[string]int{
	pmixbridge.EventSpawn: C.GORUN_SPAWN, pmixbridge.EventPublish: C.GORUN_PUBLISH, pmixbridge.EventLookup: C.GORUN_LOOKUP,
	pmixbridge.EventUnpublish: C.GORUN_UNPUBLISH, pmixbridge.EventConnect: C.GORUN_CONNECT,
	pmixbridge.EventDisconnect: C.GORUN_DISCONNECT, pmixbridge.EventDirectModex: C.GORUN_DMODEX,
}

// kindName is the event kind of a pmixsrv.h request kind.
func kindName(code C.int) string {
	for k, c := range kindCode {
		if c == int(code) {
			return k
		}
	}
	return ""
}

// cstrs returns a NULL-terminated array of n C strings in C memory, to be
// filled in and freed with freeStrs.
func cstrs(n int) []*C.char {
	p := (*[1 << 28]*C.char)(C.calloc(C.size_t(n+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	return p[: n+1 : n+1]
}

func freeStrs(s []*C.char) {
	for _, p := range s {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(&s[0]))
}

// goStrs reads a NULL-terminated array of C strings.
func goStrs(p **C.char) []string {
	var out []string
	for ; p != nil && *p != nil; p = (**C.char)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(p))) {
		out = append(out, C.GoString(*p))
	}
	return out
}

// goKVs pairs NULL-terminated key and value arrays.
func goKVs(keys, vals **C.char) []pmixbridge.KV {
	k, v := goStrs(keys), goStrs(vals)
	out := make([]pmixbridge.KV, 0, len(k))
	for i := range k {
		kv := pmixbridge.KV{Key: k[i]}
		if i < len(v) {
			kv.Value = v[i]
		}
		out = append(out, kv)
	}
	return out
}

// finalize stops libpmix.
func (s *server) finalize() {
	if s.waitInit() == nil {
		C.gorun_finalize()
	}
}

func (s *server) state(nspace *C.char, rank C.uint32_t) *pmixbridge.RankState {
	return s.ranks[C.GoString(nspace)][int(rank)]
}

// goConnected records that a rank connected, and returns non-zero to
// refuse the connection when a process of another user is connected to
// the PMIx server: libpmix 4 serves its clients over TCP, where its
// "native" security takes a client's word for its uid, so that another
// user of the node could otherwise join the job as one of its ranks.
//
//export goConnected
func goConnected(nspace *C.char, rank C.uint32_t) C.int {
	if uid, ok := foreignClient(); ok {
		fmt.Fprintf(os.Stderr, "gorun-pmix: refused a client as rank %d of %s: a process of uid %d (not this job's user) is connected to the PMIx server\n",
			int(rank), C.GoString(nspace), uid)
		return 1
	}
	srv.mu.Lock()
	if st := srv.state(nspace, rank); st != nil {
		st.Connected = true
	}
	srv.mu.Unlock()
	return 0
}

//export goFinalized
func goFinalized(nspace *C.char, rank C.uint32_t) {
	srv.mu.Lock()
	if st := srv.state(nspace, rank); st != nil {
		st.Finalized = true
	}
	srv.mu.Unlock()
}

//export goAbort
func goAbort(nspace *C.char, rank C.uint32_t, status C.int, msg *C.char) {
	srv.events <- &pmixbridge.Event{Kind: "abort", Nspace: C.GoString(nspace), Rank: int(rank), Status: int(status), Msg: C.GoString(msg)}
}

// goFence sends a fence (once this host's participants arrived): over
// the n processes names and ranks name, with this host's data.
//
//export goFence
func goFence(nspace *C.char, op C.uintptr_t, data *C.char, n C.size_t, names **C.char, ranks *C.uint32_t, nprocs C.size_t) {
	id := uint64(op)
	srv.mu.Lock()
	srv.fences[id] = true
	srv.mu.Unlock()
	e := &pmixbridge.Event{Kind: pmixbridge.EventFence, Nspace: C.GoString(nspace), ID: id, Data: C.GoBytes(unsafe.Pointer(data), C.int(n))}
	ns, rs := goStrs(names), unsafe.Slice(ranks, int(nprocs))
	for i := range ns {
		e.Procs = append(e.Procs, pmixbridge.Proc{Nspace: ns[i], Rank: pmixRank(uint32(rs[i]))})
	}
	srv.events <- e
}

// goSpawnApp records one program of a spawn that libpmix is handing over;
// goRequest then sends the spawn.
//
//export goSpawnApp
func goSpawnApp(op C.uintptr_t, cmd *C.char, argv, env **C.char, cwd *C.char, maxprocs C.int, keys, vals **C.char) {
	app := pmixbridge.SpawnApp{Cmd: C.GoString(cmd), Argv: goStrs(argv), Env: goStrs(env), Dir: C.GoString(cwd),
		MaxProcs: int(maxprocs), Info: goKVs(keys, vals)}
	srv.mu.Lock()
	srv.apps[uint64(op)] = append(srv.apps[uint64(op)], app)
	srv.mu.Unlock()
}

// goRequest sends a request that the job answers (spawn, publish, lookup,
// unpublish, connect, disconnect, dmodex) as an event: keys and vals are
// its attributes, names a lookup's or unpublish's keys, or with ranks the
// processes of a connect, a disconnect or a dmodex.
//
//export goRequest
func goRequest(nspace *C.char, rank C.uint32_t, kind C.int, op C.uintptr_t, keys, vals, names **C.char, ranks *C.uint32_t, n C.size_t) {
	id := uint64(op)
	e := &pmixbridge.Event{Kind: kindName(kind), Nspace: C.GoString(nspace), ID: id, Rank: pmixRank(uint32(rank)), Info: goKVs(keys, vals)}
	switch e.Kind {
	case pmixbridge.EventLookup, pmixbridge.EventUnpublish:
		e.Keys = goStrs(names)
	case pmixbridge.EventConnect, pmixbridge.EventDisconnect, pmixbridge.EventDirectModex:
		ns := goStrs(names)
		rs := unsafe.Slice(ranks, int(n))
		for i := range ns {
			e.Procs = append(e.Procs, pmixbridge.Proc{Nspace: ns[i], Rank: pmixRank(uint32(rs[i]))})
		}
	}
	srv.mu.Lock()
	srv.ops[id] = e.Kind
	if e.Kind == pmixbridge.EventSpawn {
		e.Spawn = srv.apps[id]
		delete(srv.apps, id)
	}
	srv.mu.Unlock()
	srv.events <- e
}

// pmixRank is a PMIx rank as the bridge numbers it: PMIX_RANK_WILDCARD
// is pmixbridge.Wildcard.
func pmixRank(r uint32) int {
	if r == C.PMIX_RANK_WILDCARD {
		return pmixbridge.Wildcard
	}
	return int(r)
}

// compactNodes renumbers r's nodes to those that run its ranks, in node
// order; r.Node becomes -1 when this host runs none of them.
func compactNodes(r *pmixbridge.StartRequest) *pmixbridge.StartRequest {
	used := make([]bool, len(r.Hosts))
	for _, n := range r.NodeOf {
		if n >= 0 && n < len(used) {
			used[n] = true
		}
	}
	index := make([]int, len(r.Hosts))
	c := *r
	c.Hosts, c.NodeOf = nil, make([]int, len(r.NodeOf))
	for n, u := range used {
		index[n] = -1
		if u {
			index[n] = len(c.Hosts)
			c.Hosts = append(c.Hosts, r.Hosts[n])
		}
	}
	for i, n := range r.NodeOf {
		c.NodeOf[i] = -1
		if n >= 0 && n < len(index) {
			c.NodeOf[i] = index[n]
		}
	}
	c.Node = index[r.Node]
	return &c
}
