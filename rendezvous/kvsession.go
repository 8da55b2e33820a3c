package rendezvous

// ServeConn's steps: a KVServer's side of one client connection, from the
// hello to the teardown.

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kvSession is one connection to a KVServer, as ServeConn's steps share it.
type kvSession struct {
	s      *KVServer
	ctx    context.Context
	c      net.Conn
	k      *kvConn // once the client said hello
	rank   int     // the client's, once it said hello; -1 before
	bye    bool    // the client said goodbye, or a failed fence dropped it: no early exit
	fences sync.WaitGroup
}

// hello takes the client's first frame, within a short time: a hello with
// the right secret and a rank served here that is not connected yet. It
// returns the hello's fields.
func (ss *kvSession) hello() ([]string, error) {
	s := ss.s
	send := func(op byte, f ...string) { ss.c.Write(encodeFrame(op, f...)) }
	ss.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := readFrame(ss.c, 4096)
	if err != nil {
		return nil, err
	}
	op, f, err := decodeFrame(p)
	if err != nil || op != opHello {
		send(opErr, msgHelloExpected)
		return nil, fmt.Errorf("rendezvous: KV client did not say hello: %v", err)
	}
	if subtle.ConstantTimeCompare([]byte(f[0]), s.cfg.Secret) != 1 {
		send(opErr, "authentication failed")
		return nil, errors.New("rendezvous: KV client presented a wrong secret")
	}
	r, err := strconv.Atoi(f[1])
	if err != nil || !s.local.ranks[r] {
		send(opErr, "unknown rank")
		return nil, fmt.Errorf("rendezvous: KV client claims unknown rank %q", f[1])
	}
	s.mu.Lock()
	dup := s.connected[r]
	s.connected[r] = true
	s.mu.Unlock()
	if dup {
		send(opErr, "rank already connected")
		return nil, fmt.Errorf("rendezvous: rank %d connected twice", r)
	}
	ss.rank = r
	ss.c.SetReadDeadline(time.Time{})
	return f, nil
}

// open makes the connection of the rank that said hello (with fields f),
// starts its writer and answers the hello. It returns the largest frame
// the client may send.
func (ss *kvSession) open(f []string) int {
	s := ss.s
	k := &kvConn{c: ss.c, pid: peerPID(ss.c), out: make(chan []byte, 16), end: make(chan struct{}), wdone: make(chan struct{}),
		waiting: map[uint64]chan string{}}
	limit := s.maxFrame()
	if len(f) == 3 && slices.Contains(strings.Split(f[2], ","), featAnswers) {
		k.answers = true
		limit = max(limit, DefaultMaxFrame)
	}
	ss.k = k
	go k.writer()
	// Known to Dump from the moment the client can see the hello's reply,
	// and its requests follow that reply.
	s.mu.Lock()
	k.out <- encodeFrame(opOK) // the first of the buffer's frames
	s.clients[ss.rank] = k
	s.mu.Unlock()
	return limit
}

// reply queues a frame for the client.
func (ss *kvSession) reply(op byte, f ...string) error {
	return ss.k.send(ss.ctx, encodeFrame(op, f...))
}

// serve reads the client's frames, of at most limit bytes, and answers
// each until the client says goodbye or breaks the protocol, the
// connection fails, or a fence of the rank's fails.
func (ss *kvSession) serve(limit int) error {
	for {
		p, err := readFrame(ss.c, limit)
		if err != nil {
			return ss.readFailed(err)
		}
		op, f, err := decodeFrame(p)
		if err != nil {
			ss.reply(opErr, err.Error())
			return err
		}
		if op == opAnswer {
			ss.k.deliver(f[0], f[1])
			continue
		}
		if ss.k.fencing.Load() {
			ss.reply(opErr, "request during a fence")
			return fmt.Errorf("rendezvous: rank %d sent op %q while its fence was in progress", ss.rank, op)
		}
		if done, err := ss.request(op, f); done || err != nil {
			return err
		}
	}
}

// readFailed is serve's error when reading a frame failed with err: the
// failed fence that ended the read, or err, which a frame too large or
// malformed also tells the client.
func (ss *kvSession) readFailed(err error) error {
	ss.k.mu.Lock()
	ferr := ss.k.fenceErr
	ss.k.mu.Unlock()
	if ferr != nil {
		ss.bye = true // dropped by us, not an early exit
		return ferr
	}
	if errors.Is(err, errFrame) {
		ss.reply(opErr, err.Error())
	}
	return err
}

// request answers one request of the client's; done says that the client
// said goodbye.
func (ss *kvSession) request(op byte, f []string) (done bool, err error) {
	s := ss.s
	switch op {
	case opPut:
		s.ops[ss.rank].Add(1)
		if f[0] == "" || len(f[0]) > s.cfg.MaxKeyLen || len(f[1]) > s.cfg.MaxValueLen {
			return false, ss.reply(opErr, "key or value too large, or empty key")
		}
		if perr := s.local.put(ss.rank, f[0], f[1]); perr != nil {
			return false, ss.reply(opErr, perr.Error())
		}
		return false, ss.reply(opOK)
	case opGet:
		s.ops[ss.rank].Add(1)
		if v, ok := s.local.get(f[0]); ok {
			return false, ss.reply(opValue, v)
		}
		return false, ss.reply(opNotFound)
	case opFence:
		s.ops[ss.rank].Add(1)
		ss.fence()
		return false, nil
	case opBye:
		ss.goodbye(f)
		return true, nil
	}
	ss.reply(opErr, "unexpected op")
	return true, fmt.Errorf("rendezvous: rank %d sent op %q", ss.rank, op)
}

// fence runs the rank's barrier beside the read loop, which goes on
// reading the client's answers, and replies when it ends. A failed fence
// ends the read loop, which returns its error.
func (ss *kvSession) fence() {
	k := ss.k
	k.fencing.Store(true)
	ss.fences.Add(1)
	go func() {
		defer ss.fences.Done()
		ferr := ss.s.local.barrier(ss.ctx, ss.rank)
		k.fencing.Store(false) // before the reply: the client's next request may follow it
		if ferr == nil {
			ss.reply(opOK)
			return
		}
		k.mu.Lock()
		k.fenceErr = ferr
		k.mu.Unlock()
		ss.reply(opErr, ferr.Error())
		ss.c.SetReadDeadline(time.Unix(1, 0)) // ends the read loop, which returns ferr
	}()
}

// goodbye keeps the final Progress the client sent with its goodbye (f),
// if any, and answers.
func (ss *kvSession) goodbye(f []string) {
	s := ss.s
	ss.bye = true
	if len(f) == 1 {
		var fin Progress
		if jerr := json.Unmarshal([]byte(f[0]), &fin); jerr == nil {
			s.mu.Lock()
			s.final[ss.rank] = fin
			s.mu.Unlock()
		} else if s.cfg.Logf != nil {
			s.cfg.Logf("rendezvous: rank %d: its final progress: %v", ss.rank, jerr)
		}
	}
	ss.reply(opOK)
}

// end tears the connection down: the frames still queued are written (for
// a while), the connection is closed and forgotten, and a rank that
// leaves without a goodbye is reported and fails the fences that wait
// for it.
func (ss *kvSession) end() {
	s, k := ss.s, ss.k
	if k != nil {
		close(k.end)
		t := time.NewTimer(flushTimeout)
		select {
		case <-k.wdone:
		case <-t.C:
		}
		t.Stop()
	}
	ss.c.Close()
	if k != nil {
		<-k.wdone
	}
	s.mu.Lock()
	delete(s.conns, ss.c)
	if k != nil && s.clients[ss.rank] == k {
		delete(s.clients, ss.rank)
	}
	s.mu.Unlock()
	if ss.rank >= 0 && !ss.bye {
		// Reported first: the ranks that gone releases fail, and
		// their exits must not overtake the report of this one.
		if s.cfg.OnEarlyExit != nil && ss.ctx.Err() == nil {
			s.cfg.OnEarlyExit(ss.rank)
		}
		s.local.gone(fmt.Errorf("rendezvous: rank %d left without closing its KV client", ss.rank))
	}
	ss.fences.Wait() // ended by gone, ctx or the fence's own end
}
