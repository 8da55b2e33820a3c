package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
)

const (
	// helloMagic starts every hello and hello reply ("gcx1").
	helloMagic = 0x67637831
	// helloSize is the size of a hello: magic, rank and size, as big-endian
	// uint32s.
	helloSize = 12
	// helloTimeout bounds how long an accepted connection may take to say
	// hello; the dialer sends it at once.
	helloTimeout = 10 * time.Second
	// headerSize is the size of a message header: the operation's number
	// and the payload's length, as big-endian uint64s.
	headerSize = 16
	// userTimeout is how long sent data may stay unacknowledged before the
	// connection fails (TCP_USER_TIMEOUT, where the platform has it).
	userTimeout = 10 * time.Second
)

// keepAlive makes an idle connection to a host that went away fail in
// about five seconds (2 s idle, then 3 probes 1 s apart).
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: time.Second, Count: 3}

// aLongTimeAgo is a deadline in the past: setting it stops the reads and
// writes in flight on a connection.
var aLongTimeAgo = time.Unix(1, 0)

// errNotHello marks an accepted connection that did not start with a hello
// of this plugin (a stray connection); Join drops it and goes on.
var errNotHello = errors.New("not a collexample hello")

// Join connects the full mesh: this rank dials every higher rank and accepts
// one connection from every lower rank, concurrently. The dialer sends a
// hello with its rank and the job's size, the acceptor checks it and
// answers with its own, which the dialer checks in turn. This rank's place
// is where its own Handle is among handles (which must agree with
// sdk.Config's Rank when that is set). The listener closes when Join
// returns; on success the worker goroutine starts.
func (c *collective) Join(ctx context.Context, handles [][]byte) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return fmt.Errorf("collexample: join: %w", sdk.ErrClosed)
	case c.joined:
		c.mu.Unlock()
		return errors.New("collexample: join called twice")
	}
	c.joined = true
	c.mu.Unlock()
	defer c.ln.Close()

	rank, err := c.findSelf(handles)
	if err != nil {
		return err
	}
	size := len(handles)
	peers := make([]*peer, size)

	// The first failure cancels jctx with itself as the cause, which stops
	// the other half; context.Cause(jctx) is then the error to return.
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopListener := context.AfterFunc(jctx, func() { _ = c.ln.SetDeadline(aLongTimeAgo) })
	defer stopListener()

	accepted := make(chan error, 1)
	go func() {
		err := c.acceptLower(jctx, rank, size, peers)
		if err != nil {
			cancel(err)
		}
		accepted <- err
	}()
	var dialErr error
	for r := rank + 1; r < size && dialErr == nil; r++ {
		peers[r], dialErr = c.dial(jctx, rank, size, r, string(handles[r]))
		if dialErr != nil {
			cancel(dialErr)
		}
	}
	acceptErr := <-accepted

	if dialErr != nil || acceptErr != nil {
		closePeers(peers)
		err := context.Cause(jctx)
		if ctx.Err() != nil {
			err = fmt.Errorf("collexample: join as rank %d of %d: %w", rank, size, err)
		}
		return err
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		closePeers(peers)
		return fmt.Errorf("collexample: join: %w", sdk.ErrClosed)
	}
	c.rank, c.size, c.peers = rank, size, peers
	c.wg.Add(1)
	go c.work()
	c.mu.Unlock()
	c.log.Info("joined", "rank", rank, "size", size, "handle", string(c.handle))
	return nil
}

// findSelf returns the index of this rank's handle among handles.
func (c *collective) findSelf(handles [][]byte) (int, error) {
	rank := -1
	for i, h := range handles {
		if bytes.Equal(h, c.handle) {
			if rank >= 0 {
				return 0, fmt.Errorf("collexample: join: handle %s is both rank %d's and rank %d's", c.handle, rank, i)
			}
			rank = i
		}
	}
	switch {
	case rank < 0:
		return 0, fmt.Errorf("collexample: join: this rank's handle %s is not among the %d handles", c.handle, len(handles))
	case c.cfgRank >= 0 && c.cfgRank != rank:
		return 0, fmt.Errorf("collexample: join: this rank is rank %d but its handle %s is the handle of rank %d", c.cfgRank, c.handle, rank)
	}
	return rank, nil
}

// acceptLower accepts the connections of ranks 0 to rank-1 into peers.
func (c *collective) acceptLower(ctx context.Context, rank, size int, peers []*peer) error {
	for got := 0; got < rank; {
		conn, err := c.ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("collexample: join: rank %d accepting connections: %w", rank, err)
		}
		from, err := c.greet(ctx, conn, rank, size)
		if errors.Is(err, errNotHello) {
			c.log.Warn("dropped a connection that is not a collexample hello", "from", conn.RemoteAddr(), "error", err)
			_ = conn.Close()
			continue
		}
		if err == nil && peers[from] != nil {
			err = fmt.Errorf("collexample: join: rank %d got a second connection from rank %d (%s)", rank, from, conn.RemoteAddr())
		}
		if err != nil {
			_ = conn.Close()
			return err
		}
		peers[from] = &peer{rank: from, conn: conn}
		got++
	}
	return nil
}

// greet reads the hello of a connection that acceptLower accepted, checks
// that it comes from a lower rank of the same size, answers it and returns
// the dialer's rank.
func (c *collective) greet(ctx context.Context, conn *net.TCPConn, rank, size int) (int, error) {
	if err := setOptions(conn); err != nil {
		return 0, fmt.Errorf("collexample: join: connection from %s: %w", conn.RemoteAddr(), err)
	}
	if err := conn.SetDeadline(time.Now().Add(helloTimeout)); err != nil {
		return 0, fmt.Errorf("collexample: join: connection from %s: %w", conn.RemoteAddr(), err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	magic, from, fromSize, err := readHello(conn)
	switch {
	case err != nil:
		return 0, fmt.Errorf("collexample: join: hello from %s: %w", conn.RemoteAddr(), err)
	case magic != helloMagic:
		return 0, fmt.Errorf("from %s: magic %#x: %w", conn.RemoteAddr(), magic, errNotHello)
	case fromSize != size || from >= rank:
		return 0, fmt.Errorf("collexample: join: rank %d of %d got a hello from rank %d of %d (%s); only lower ranks of the same job connect",
			rank, size, from, fromSize, conn.RemoteAddr())
	}
	if err := writeHello(conn, rank, size); err != nil {
		return 0, fmt.Errorf("collexample: join: answer the hello of rank %d (%s): %w", from, conn.RemoteAddr(), err)
	}
	if !stop() {
		return 0, context.Cause(ctx)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return 0, fmt.Errorf("collexample: join: connection from rank %d: %w", from, err)
	}
	return from, nil
}

// dial connects to rank to at addr, says hello and checks the answer.
func (c *collective) dial(ctx context.Context, rank, size, to int, addr string) (p *peer, err error) {
	d := net.Dialer{KeepAliveConfig: keepAlive}
	nc, err := d.DialContext(ctx, "tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("collexample: join: rank %d connecting to rank %d at %s: %w", rank, to, addr, err)
	}
	conn := nc.(*net.TCPConn)
	defer func() {
		if err != nil {
			_ = conn.Close()
		}
	}()
	if err := setOptions(conn); err != nil {
		return nil, fmt.Errorf("collexample: join: connection to rank %d at %s: %w", to, addr, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	if err := writeHello(conn, rank, size); err != nil {
		return nil, fmt.Errorf("collexample: join: hello to rank %d at %s: %w", to, addr, err)
	}
	magic, got, gotSize, err := readHello(conn)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case err != nil:
		return nil, fmt.Errorf("collexample: join: answer of rank %d at %s: %w", to, addr, err)
	case magic != helloMagic || got != to || gotSize != size:
		return nil, fmt.Errorf("collexample: join: %s answered as rank %d of %d (magic %#x), want rank %d of %d",
			addr, got, gotSize, magic, to, size)
	}
	if !stop() {
		return nil, context.Cause(ctx)
	}
	return &peer{rank: to, conn: conn}, nil
}

// setOptions sets the options that make a connection to a host that went
// away fail within seconds.
func setOptions(conn *net.TCPConn) error {
	if err := conn.SetKeepAliveConfig(keepAlive); err != nil {
		return fmt.Errorf("set keep-alive: %w", err)
	}
	if err := setUserTimeout(conn, userTimeout); err != nil {
		return fmt.Errorf("set TCP user timeout: %w", err)
	}
	return nil
}

func writeHello(w io.Writer, rank, size int) error {
	var b [helloSize]byte
	binary.BigEndian.PutUint32(b[0:], helloMagic)
	binary.BigEndian.PutUint32(b[4:], uint32(rank))
	binary.BigEndian.PutUint32(b[8:], uint32(size))
	_, err := w.Write(b[:])
	return err
}

func readHello(r io.Reader) (magic uint32, rank, size int, err error) {
	var b [helloSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, 0, 0, err
	}
	return binary.BigEndian.Uint32(b[0:]), int(binary.BigEndian.Uint32(b[4:])), int(binary.BigEndian.Uint32(b[8:])), nil
}

// closePeers closes the connections in peers.
func closePeers(peers []*peer) {
	for _, p := range peers {
		if p != nil {
			_ = p.conn.Close()
		}
	}
}

// write sends buf as the message of operation seq.
func (p *peer) write(seq uint64, buf []byte) error {
	var hdr [headerSize]byte
	binary.BigEndian.PutUint64(hdr[0:], seq)
	binary.BigEndian.PutUint64(hdr[8:], uint64(len(buf)))
	bufs := net.Buffers{hdr[:], buf}
	_, err := bufs.WriteTo(p.conn)
	return err
}

// read receives the message of operation seq into buf, which must be its
// exact length.
func (p *peer) read(seq uint64, buf []byte) error {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(p.conn, hdr[:]); err != nil {
		return err
	}
	gotSeq, gotLen := binary.BigEndian.Uint64(hdr[0:]), binary.BigEndian.Uint64(hdr[8:])
	if gotSeq != seq || gotLen != uint64(len(buf)) {
		return fmt.Errorf("%w: got operation %d of %d bytes, want operation %d of %d bytes (do all ranks start the same operations in the same order?)",
			errProtocol, gotSeq, gotLen, seq, len(buf))
	}
	_, err := io.ReadFull(p.conn, buf)
	return err
}

// abort stops the transfers in flight on the connection, which stays open.
func (p *peer) abort() { _ = p.conn.SetDeadline(aLongTimeAgo) }
