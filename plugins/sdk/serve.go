package sdk

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/transport"
)

// EnvLogLevel sets the level of a plugin's log ("trace", "debug", "info",
// "warn", "error"; default "info"). gorun passes it on from its own
// environment.
const EnvLogLevel = env.PluginLog

// Serve runs the plugin: it answers gorun's handshake, serves the control
// plane over gRPC and the data plane over shared memory, and returns only
// when gorun stops the plugin (then the process exits). Run directly, not
// by gorun, it says so and exits with status 1.
func Serve(p Plugin) {
	level := hclog.LevelFromString(os.Getenv(EnvLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	// JSON on standard error: go-plugin's host side parses it and gorun
	// shows each entry tagged with the plugin's name.
	log := hclog.New(&hclog.LoggerOptions{Name: p.Name, Level: level, Output: os.Stderr, JSONFormat: true})
	if p.Transport == nil && p.Collective == nil && p.Memory == nil {
		log.Error("the plugin provides no transport, collective or memory")
		os.Exit(1)
	}
	// The plugin inherits the rank's GOMAXPROCS (gorun bench sets 1): one
	// P serves it best where cores are few (measured on 2 vCPUs: 1.2 to 2
	// times the busbw of 2 Ps), as its goroutines hand work to each other
	// without waking another thread.
	go watchParent(log)
	s := &server{p: p, log: log}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.PluginSets(s),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           log,
	})
	s.shutdown()
	os.Exit(0)
}

// watchParent ends the plugin when the process that started it is gone,
// in case the parent-death signal gorun asks for did not reach it (the
// thread that started it ended).
func watchParent(log hclog.Logger) {
	parent := os.Getppid()
	for {
		time.Sleep(time.Second)
		if os.Getppid() != parent {
			log.Warn("the rank that started the plugin is gone; exiting")
			os.Exit(1)
		}
	}
}

// server is the plugin's control service and owner of the data plane.
type server struct {
	p   Plugin
	log hclog.Logger

	mu        sync.Mutex
	inited    bool
	tr        Transport
	coll      Collective
	mem       Memory
	loop      *loop
	listeners map[uint64]Listener
	nextID    uint64
	closed    bool
	handoff   Handoff // the transport, when its connections go to the rank
}

var _ wire.Control = (*server)(nil)

func (s *server) id() uint64 {
	s.nextID++
	return s.nextID
}

func (s *server) Info(context.Context, *wire.Empty) (*wire.InfoReply, error) {
	return &wire.InfoReply{
		Name: s.p.Name, Version: s.p.Version, Description: s.p.Description,
		Transport: s.p.Transport != nil, Collective: s.p.Collective != nil,
		Memory: s.p.Memory != nil,
	}, nil
}

func (s *server) Init(ctx context.Context, req *wire.InitReq) (*wire.InitReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inited {
		return nil, fmt.Errorf("%s: init called twice", s.p.Name)
	}
	seg, err := wire.MapSegment(wire.FDSegment, false)
	if err != nil {
		return nil, fmt.Errorf("%s: was the plugin started by gorun? %w", s.p.Name, err)
	}
	sock, err := openSocket()
	if err != nil {
		seg.Unmap()
		return nil, fmt.Errorf("%s: region socket: %w", s.p.Name, err)
	}
	mine, err := wire.OpenBell(wire.FDPluginBell, "plugin-bell")
	if err != nil {
		seg.Unmap()
		sock.Close()
		return nil, err
	}
	theirs, err := wire.OpenBell(wire.FDHostBell, "host-bell")
	if err != nil {
		seg.Unmap()
		sock.Close()
		mine.Close()
		return nil, err
	}
	wake := &waker{bell: mine}
	cfg := Config{Rank: req.Rank, Size: req.Size, LocalRank: req.LocalRank, Iface: req.Iface, Options: req.Options, Logger: s.log, Wake: wake.wake, Handoff: req.Handoff}
	if cfg.Options == nil {
		cfg.Options = map[string]string{}
	}
	if s.p.Transport != nil {
		if s.tr, err = s.p.Transport(cfg); err != nil {
			err = fmt.Errorf("%s: starting the transport: %w", s.p.Name, err)
		}
	}
	if err == nil && s.p.Collective != nil {
		if s.coll, err = s.p.Collective(cfg); err != nil {
			err = fmt.Errorf("%s: starting the collective: %w", s.p.Name, err)
		}
	}
	if err == nil && s.p.Memory != nil {
		if s.mem, err = s.p.Memory(cfg); err != nil {
			err = fmt.Errorf("%s: starting the device memory: %w", s.p.Name, err)
		}
	}
	if err != nil {
		if s.tr != nil {
			s.tr.Close()
		}
		if s.coll != nil {
			s.coll.Close()
		}
		seg.Unmap()
		sock.Close()
		mine.Close()
		theirs.Close()
		return nil, err
	}
	s.listeners = map[uint64]Listener{}
	s.loop = newLoop(s.p.Name, s.log, seg, mine, theirs, s.tr, s.coll, s.mem, wake)
	go s.loop.run()
	go s.loop.serveRegions(sock)
	s.inited = true
	if h, ok := s.tr.(Handoff); ok && req.Handoff {
		s.handoff = h
	}
	return &wire.InitReply{Handoff: s.handoff != nil}, nil
}

// openSocket wraps the inherited region socket.
func openSocket() (*net.UnixConn, error) {
	f := os.NewFile(wire.FDSocket, "region-socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("descriptor %d is not a Unix socket", wire.FDSocket)
	}
	return uc, nil
}

func (s *server) transport() (Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.inited:
		return nil, fmt.Errorf("%s: not initialized", s.p.Name)
	case s.tr == nil:
		return nil, fmt.Errorf("%s: %w: the plugin provides no transport", s.p.Name, ErrNotSupported)
	}
	return s.tr, nil
}

func (s *server) Devices(ctx context.Context, _ *wire.Empty) (*wire.DevicesReply, error) {
	var devs []Device
	s.mu.Lock()
	tr, mem := s.tr, s.mem
	s.mu.Unlock()
	if tr == nil && mem != nil {
		var err error
		if devs, err = mem.Devices(ctx); err != nil {
			return nil, err
		}
	} else {
		t, err := s.transport()
		if err != nil {
			return nil, err
		}
		if devs, err = t.Devices(ctx); err != nil {
			return nil, err
		}
	}
	out := &wire.DevicesReply{Devices: []wire.Device{}}
	for _, d := range devs {
		out.Devices = append(out.Devices, wire.Device(d))
	}
	return out, nil
}

func (s *server) Listen(ctx context.Context, _ *wire.Empty) (*wire.ListenReply, error) {
	t, err := s.transport()
	if err != nil {
		return nil, err
	}
	l, err := t.Listen(ctx)
	if err != nil {
		return nil, err
	}
	h := l.Handle()
	if len(h) == 0 || len(h) > transport.MaxHandleSize {
		l.Close()
		return nil, fmt.Errorf("%s: listener handle of %d bytes (1 to %d allowed)", s.p.Name, len(h), transport.MaxHandleSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.id()
	s.listeners[id] = l
	return &wire.ListenReply{ID: id, Handle: h}, nil
}

func (s *server) listener(id uint64) (Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.listeners[id]
	if l == nil {
		return nil, fmt.Errorf("%s: %w: no listener %d", s.p.Name, ErrClosed, id)
	}
	return l, nil
}

func (s *server) Accept(ctx context.Context, req *wire.IDReq) (*wire.ConnReply, error) {
	l, err := s.listener(req.ID)
	if err != nil {
		return nil, err
	}
	rc, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	if s.handoff != nil {
		return s.handOff(rc, rc.Peer(), "accept", rc.Close)
	}
	id := s.loop.addRecv(rc)
	return &wire.ConnReply{ID: id, Peer: rc.Peer()}, nil
}

// handOff takes the sockets of a new connection (conn) from the transport
// and keeps them until the host fetches them.
func (s *server) handOff(conn any, peer, op string, closeConn func() error) (*wire.ConnReply, error) {
	files, err := s.handoff.HandOff(conn)
	if err == nil && (len(files) == 0 || len(files) > wire.MaxSockets) {
		for _, f := range files {
			f.Close()
		}
		err = fmt.Errorf("%d sockets handed off (1 to %d allowed)", len(files), wire.MaxSockets)
	}
	if err != nil {
		closeConn()
		return nil, fmt.Errorf("%s: %s, peer %s: handing the connection to the rank: %w", s.p.Name, op, peer, err)
	}
	id := s.loop.addHandoff(files)
	return &wire.ConnReply{ID: id, Peer: peer, Sockets: len(files)}, nil
}

func (s *server) Connect(ctx context.Context, req *wire.ConnectReq) (*wire.ConnReply, error) {
	t, err := s.transport()
	if err != nil {
		return nil, err
	}
	sc, err := t.Connect(ctx, req.Handle)
	if err != nil {
		return nil, err
	}
	if s.handoff != nil {
		return s.handOff(sc, sc.Peer(), "connect", sc.Close)
	}
	id := s.loop.addSend(sc)
	return &wire.ConnReply{ID: id, Peer: sc.Peer()}, nil
}

func (s *server) CloseListener(_ context.Context, req *wire.IDReq) (*wire.Empty, error) {
	s.mu.Lock()
	l := s.listeners[req.ID]
	delete(s.listeners, req.ID)
	s.mu.Unlock()
	if l != nil {
		l.Close()
	}
	return &wire.Empty{}, nil
}

func (s *server) collective() (Collective, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.coll == nil {
		return nil, fmt.Errorf("%s: %w: the plugin provides no collective", s.p.Name, ErrNotSupported)
	}
	return s.coll, nil
}

func (s *server) CollHandle(context.Context, *wire.Empty) (*wire.HandleReply, error) {
	c, err := s.collective()
	if err != nil {
		return nil, err
	}
	return &wire.HandleReply{Handle: c.Handle()}, nil
}

func (s *server) CollJoin(ctx context.Context, req *wire.JoinReq) (*wire.Empty, error) {
	c, err := s.collective()
	if err != nil {
		return nil, err
	}
	if err := c.Join(ctx, req.Handles); err != nil {
		return nil, err
	}
	return &wire.Empty{}, nil
}

// shutdown closes what the plugin opened, once gorun has stopped serving
// it.
func (s *server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, l := range s.listeners {
		l.Close()
	}
	if s.loop != nil {
		s.loop.stop()
	}
	if s.coll != nil {
		s.coll.Close()
	}
	if s.mem != nil {
		s.mem.Close()
	}
	if s.tr != nil {
		s.tr.Close()
	}
}

// errText is an error's text for a completion record, bounded.
func errText(err error) []byte {
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return []byte(strings.ToValidUTF8(msg, "?"))
}
