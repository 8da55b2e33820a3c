package simcluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher"
)

// Serve runs the cluster's agents for a head in another process: each
// connection on ln names a host on its first line ("sim0001\n") and is
// then that host's control stream, over the host's simulated link. It
// returns when ln is closed.
func (c *Cluster) Serve(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		go c.serveConn(conn)
	}
}

func (c *Cluster) serveConn(conn net.Conn) {
	r := bufio.NewReader(conn)
	name, err := r.ReadString('\n')
	if err != nil {
		conn.Close()
		return
	}
	p, err := c.StartAgent(context.Background(), hostfile.Host{Name: strings.TrimSpace(name)})
	if err != nil {
		fmt.Fprintf(conn, "%v\n", err)
		conn.Close()
		return
	}
	var once sync.Once
	cut := func() { once.Do(func() { p.Kill(); conn.Close() }) }
	go func() {
		// The head's bytes: its closing its side is the agent's EOF.
		if _, err := io.Copy(p, r); err != nil {
			cut()
			return
		}
		p.Close()
	}()
	if _, err := io.Copy(conn, p); err != nil {
		cut()
		return
	}
	if uc, ok := conn.(*net.UnixConn); ok {
		uc.CloseWrite()
	}
	p.Wait()
}

// Dialer is the head's side of Serve: a launcher.Starter that reaches
// each host's agent through the cluster's socket.
type Dialer struct {
	Socket string
}

// StartAgent connects to host's agent.
func (d *Dialer) StartAgent(ctx context.Context, host hostfile.Host) (launcher.AgentProcess, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", d.Socket)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", host.Name, err)
	}
	if _, err := io.WriteString(conn, host.Name+"\n"); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", host.Name, err)
	}
	return &dialed{c: conn.(*net.UnixConn), ended: make(chan struct{})}, nil
}

type dialed struct {
	c     *net.UnixConn
	ended chan struct{}
	once  sync.Once
}

func (d *dialed) end() { d.once.Do(func() { close(d.ended) }) }

func (d *dialed) Read(p []byte) (int, error) {
	n, err := d.c.Read(p)
	if err != nil {
		d.end()
	}
	return n, err
}
func (d *dialed) Write(p []byte) (int, error) { return d.c.Write(p) }
func (d *dialed) Close() error                { return d.c.CloseWrite() }
func (d *dialed) Remote() bool                { return true }
func (d *dialed) Wait() error {
	select {
	case <-d.ended:
	case <-time.After(10 * time.Second):
	}
	return d.c.Close()
}
func (d *dialed) Kill() error {
	d.end()
	return d.c.Close()
}
