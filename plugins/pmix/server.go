//go:build cgo

package main

/*
#cgo pkg-config: pmix
#include <stdlib.h>
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

	initDone chan struct{} // closed when libpmix's server is up (or failed)
	initErr  error
}

var srv = &server{
	events:   make(chan *pmixbridge.Event, 1024),
	ranks:    map[string]map[int]*pmixbridge.RankState{},
	fences:   map[uint64]bool{},
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
	s.mu.Lock()
	defer s.mu.Unlock()
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
	if C.gorun_register(ns, C.uint32_t(size), C.uint32_t(nn), &hosts[0], &nodeOf[0], &localOf[0], appOf,
		C.uint32_t(r.Node), &errBuf[0], C.size_t(len(errBuf))) != 0 {
		return nil, cerr(errBuf)
	}
	states := map[int]*pmixbridge.RankState{}
	s.ranks[r.Nspace] = states
	reply := &pmixbridge.StartReply{Env: map[int][]string{}}
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

//export goFence
func goFence(nspace *C.char, op C.uintptr_t, data *C.char, n C.size_t) {
	id := uint64(op)
	srv.mu.Lock()
	srv.fences[id] = true
	srv.mu.Unlock()
	srv.events <- &pmixbridge.Event{Kind: "fence", Nspace: C.GoString(nspace), ID: id, Data: C.GoBytes(unsafe.Pointer(data), C.int(n))}
}
