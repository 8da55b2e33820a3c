package launcher

// The door: how gorun's network-facing ports that take connections not
// yet proven (the connect-back's agents' port, srun's and a per-node
// round's; a per-node launch's endpoint) bound the handshakes in flight.
// Anyone who can reach such a port may connect, so a flood must neither
// take the process's descriptors and memory nor keep a genuine peer out:
//
//   - at most total handshakes are in flight, and at most perSource from
//     one source address;
//   - a connection beyond either bound takes the place of one in flight
//     (of its own address, when that address is the full one): the oldest
//     that has sent nothing yet, else the oldest that has been in flight
//     doorYoung or more. A handshake under way (its first byte, a TLS
//     ClientHello, came) is never closed before it is doorYoung old, so a
//     storm of connections, however fast it reopens them, closes only its
//     own silent ones and stale ones;
//   - when there is no such connection, the new one is closed at once and
//     counted: a peer that meets it tries again (DialHead, a node's join).
//
// Refusals go to one refusals value: the first said, the rest counted.

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// doorMargin is how many handshakes in flight a door allows beyond one
// per node of its job, and the least it allows from one source address.
const doorMargin = 64

// doorYoung is how long a connection whose handshake is under way is safe
// from being closed to make room. A genuine handshake takes milliseconds;
// this leaves a loaded machine room, and is well within the doors' own
// handshake bounds (headHandshakeTimeout, rdzvShake).
const doorYoung = 2 * time.Second

// door bounds the handshakes in flight on one listener (see the top of
// this file). Its zero value is not usable: see newDoor.
type door struct {
	total     int              // handshakes in flight, in all
	perSource int              // handshakes in flight from one source address
	refused   *refusals        // where refusals are said and counted
	now       func() time.Time // the clock; nil: time.Now

	mu   sync.Mutex
	open []*doorConn    // in flight, oldest first
	from map[string]int // in flight, per source address
}

// newDoor returns the door of a port where the agents (or nodes) of a job
// of nodes nodes come in, refusals going to refused. It lets in every one
// of them at once, and doorMargin more: srun starts the agents together,
// and the head finishes about 3,000 handshakes a second per core
// (bench/connectback.sh), so a fixed 64 lost the latest of a burst of a
// few hundred agents. One source address may hold as many as the job has
// nodes (a test cluster's nodes share one), and at least doorMargin: a
// flood from one address leaves room for the job's nodes elsewhere while
// nodes <= doorMargin, and doorMargin handshakes at a time beyond.
func newDoor(nodes int, refused *refusals) *door {
	return &door{total: nodes + doorMargin, perSource: max(nodes, doorMargin), refused: refused, from: map[string]int{}}
}

// doorConn is a connection in a door: it notes when its first byte is
// read.
type doorConn struct {
	net.Conn
	src     string    // its source address (IP)
	since   time.Time // when it came in
	spoke   atomic.Bool
	evicted atomic.Pointer[string] // why the door closed it for a newcomer
}

// Read reads from the connection, and notes that it spoke.
func (c *doorConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
	}
	return n, err
}

// silent reports whether c has sent nothing yet: no byte read from it, and
// none waiting to be read.
func (c *doorConn) silent() bool { return !c.spoke.Load() && !pending(c.Conn) }

// serve accepts connections on ln until it is closed, and runs shake on
// each that d admits, in a goroutine of its own. A connection is in flight
// until shake returns: shake returns once the handshake is over, having
// refused (and closed) the connection, or with what to do with the proven
// one (then, nil for nothing), which runs once it is out of flight, where
// no newcomer can take its place. Accept errors (out of descriptors, a
// connection aborted) are waited out with a growing pause, as net/http's
// server does, never taken as the end.
func (d *door) serve(ln net.Listener, shake func(net.Conn) (then func())) {
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d.refused.add(nil, "accept: "+err.Error())
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
			continue
		}
		pause = 0
		dc, victim, why := d.admit(c)
		if victim != nil {
			victim.Conn.Close() // its handshake fails, and shake counts it (see refusal)
		}
		if dc == nil {
			c.Close()
			d.refused.add(c.RemoteAddr(), why)
			continue
		}
		go func() {
			then := shake(dc)
			d.leave(dc)
			if then != nil {
				then()
			}
		}()
	}
}

// admit takes c in, or says why not. Where the door, or c's source
// address, is full, c takes the place of a victim, which the caller
// closes (see the top of this file); where there is none, dc is nil.
func (d *door) admit(c net.Conn) (dc, victim *doorConn, why string) {
	now := time.Now()
	if d.now != nil {
		now = d.now()
	}
	dc = &doorConn{Conn: c, src: HostOf(c.RemoteAddr()), since: now}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.from[dc.src] >= d.perSource:
		if victim = d.victim(dc.src, now); victim == nil {
			return nil, nil, fmt.Sprintf("%d handshakes from %s are under way already (at most %d from one address), none silent or older than %v",
				d.from[dc.src], dc.src, d.perSource, doorYoung)
		}
	case len(d.open) >= d.total:
		if victim = d.victim("", now); victim == nil {
			return nil, nil, fmt.Sprintf("%d handshakes are under way already, none silent or older than %v", len(d.open), doorYoung)
		}
	}
	if victim != nil {
		d.remove(victim)
		what := "it had sent nothing"
		if victim.spoke.Load() {
			what = "its handshake was older than " + doorYoung.String()
		}
		why := fmt.Sprintf("closed after %v to make room for a newer connection: %s", now.Sub(victim.since).Round(time.Millisecond), what)
		victim.evicted.Store(&why)
	}
	d.open = append(d.open, dc)
	d.from[dc.src]++
	return dc, victim, ""
}

// victim is the connection in flight from src ("": from anywhere) to close
// for room: the oldest that is silent, else the oldest in flight for
// doorYoung or more; nil when every one has spoken and is younger.
func (d *door) victim(src string, now time.Time) *doorConn {
	var stale *doorConn
	for _, o := range d.open {
		if src != "" && o.src != src {
			continue
		}
		if o.silent() {
			return o
		}
		if stale == nil && now.Sub(o.since) >= doorYoung {
			stale = o
		}
	}
	return stale
}

// refusal is what to say of a connection whose handshake failed with err:
// err, unless the door closed it for a newcomer (its handshake's error is
// then only the closed connection).
func refusal(c net.Conn, err error) string {
	if dc, ok := c.(*doorConn); ok {
		if why := dc.evicted.Load(); why != nil {
			return *why
		}
	}
	return err.Error()
}

// leave takes dc out of flight once its handshake ended (a victim is out
// already).
func (d *door) leave(dc *doorConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.remove(dc)
}

// remove takes dc out of flight if it is in; d.mu is held.
func (d *door) remove(dc *doorConn) {
	i := slices.Index(d.open, dc)
	if i < 0 {
		return
	}
	d.open = slices.Delete(d.open, i, i+1)
	if d.from[dc.src]--; d.from[dc.src] <= 0 {
		delete(d.from, dc.src)
	}
}

// pending reports whether c has bytes waiting to be read, without reading
// them: a peer that spoke before anything read from it (a ClientHello
// that came while its handshake's goroutine waited to run).
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	// Control, not Read: Read would wait for the handshake's own reader.
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
