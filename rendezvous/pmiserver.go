package rendezvous

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// PMIConfig configures a PMIServer for the ranks of one host.
type PMIConfig struct {
	// Size is the number of ranks in the job (PMI_SIZE).
	Size int
	// Ranks are the job ranks this server serves (this host's ranks). Its
	// barrier waits for all of them before the job-wide fence.
	Ranks []int
	// KVSName is the job's KVS name, for example "kvs_<jobid>_0"; no spaces,
	// at most 255 bytes. Default "kvs_gorun_0".
	KVSName string
	// AppNum is the MPMD application index (default 0).
	AppNum int
	// AppNums, if set, is each local rank's MPMD application index (a job
	// of several programs); a rank it lacks gets AppNum.
	AppNums map[int]int
	// UniverseSize answers get_universe_size (default Size).
	UniverseSize int
	// ProcessMapping is the PMI_process_mapping value (see ProcessMapping).
	// Empty means absent: MPICH then falls back to comparing hostnames.
	ProcessMapping string
	// Preload holds further job-wide key-values known before launch.
	Preload map[string]string
	// Fencer runs the job-wide fence once all local ranks entered a barrier.
	Fencer Fencer
	// MaxLine is the longest request line accepted, newline included
	// (default PMIMaxLine). A longer line gets an error reply and the
	// connection is closed.
	MaxLine int
	// OnAbort is called once per cmd=abort (rank, exit code, message). The
	// aborting rank gets no reply: the caller must kill the job (pmi.md §6).
	OnAbort func(rank, code int, msg string)
	// FenceTimeout bounds a barrier from the first local rank's arrival
	// (0 = no bound); OnFenceTimeout is told the local ranks that never
	// arrived (their peers' barrier then fails).
	FenceTimeout   time.Duration
	OnFenceTimeout func(missing []int)
	// OnEarlyExit is called when a rank that sent init ends its connection
	// before finalize (and without abort). The barrier of the other local
	// ranks fails whether or not it sent init.
	OnEarlyExit func(rank int)
	// Names, if set, serves MPI name publishing (publish_name, lookup_name,
	// unpublish_name: op is "publish", "lookup" or "unpublish"): it
	// returns a lookup's port, or why the request failed (the rank gets
	// rc=-1 and the reason). It may block: the rank waits for its reply.
	// Without it the rank gets rc=1 msg=not_supported.
	Names func(rank int, op, service, port string) (string, error)
	// Spawn, if set, serves MPI_Comm_spawn (the mcmd=spawn blocks of one
	// PMI_Spawn_multiple): it returns once the spawned ranks started, or
	// with why they could not (the rank gets rc=-1 and the reason). It may
	// block. Without it the rank gets rc=-1 msg=not_supported.
	Spawn func(rank int, sp PMISpawn) error
	// OnFenceError is called when a barrier fails (the job-wide fence
	// failed, or a local rank is gone). The waiting ranks' connections are
	// closed, so their PMI call fails instead of hanging.
	OnFenceError func(err error)
	// RankBudget bounds what one rank may put in a generation, JobBudget
	// what the job may hold (zero fields: DefaultRankBudget and
	// DefaultJobBudget). A put over either gets rc=-1 with a msg that
	// names the budget; the connection stays up.
	RankBudget, JobBudget Budget
	// Logf, if set, receives protocol errors, unsupported commands and
	// each rank's first refused put.
	Logf func(format string, args ...any)
}

// PMIServer serves the PMI-1 "simple" wire protocol of MPICH 4.0.2 (see
// gorun's pmi.md) to one host's ranks and aggregates their barriers into one
// Fencer call. Use ServeConn for PMI_FD socketpairs and Serve for a
// PMI_PORT listener with PMI_ID.
type PMIServer struct {
	cfg   PMIConfig
	local *localKV
	ops   map[int]*atomic.Uint64 // by rank; fixed at NewPMIServer

	mu        sync.Mutex
	conns     map[net.Conn]bool
	connected map[int]bool
	closed    bool
	wg        sync.WaitGroup
}

// NewPMIServer checks cfg and returns a server.
func NewPMIServer(cfg PMIConfig) (*PMIServer, error) {
	if cfg.Size <= 0 {
		return nil, fmt.Errorf("rendezvous: PMI job size %d", cfg.Size)
	}
	for _, r := range cfg.Ranks {
		if r >= cfg.Size {
			return nil, fmt.Errorf("rendezvous: local rank %d not below job size %d", r, cfg.Size)
		}
	}
	if cfg.KVSName == "" {
		cfg.KVSName = "kvs_gorun_0"
	}
	if len(cfg.KVSName) >= PMIKVSNameMax || !pmiValueOK(cfg.KVSName) {
		return nil, fmt.Errorf("rendezvous: bad KVS name %q", cfg.KVSName)
	}
	if cfg.UniverseSize <= 0 {
		cfg.UniverseSize = cfg.Size
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = PMIMaxLine
	}
	preload := copyMap(cfg.Preload)
	if cfg.ProcessMapping != "" {
		preload["PMI_process_mapping"] = cfg.ProcessMapping
	}
	for k, v := range preload {
		if len(k) >= PMIKeyLenMax || len(v) >= PMIValLenMax || !pmiValueOK(k) || !pmiValueOK(v) {
			return nil, fmt.Errorf("rendezvous: preloaded key %q cannot travel over PMI", k)
		}
	}
	local, ops, err := newServerKV(serverKV{
		fencer:     cfg.Fencer,
		ranks:      cfg.Ranks,
		preload:    preload,
		watch:      fenceWatch{Timeout: cfg.FenceTimeout, OnTimeout: cfg.OnFenceTimeout},
		rankBudget: cfg.RankBudget,
		jobBudget:  cfg.JobBudget,
		logf:       cfg.Logf,
	})
	if err != nil {
		return nil, err
	}
	return &PMIServer{cfg: cfg, local: local, ops: ops, conns: map[net.Conn]bool{}, connected: map[int]bool{}}, nil
}

// Ops returns how many PMI commands rank sent so far (init, put, get,
// barrier_in, ...), or 0 for a rank this server does not serve. A rank
// whose count stops growing makes no rendezvous calls.
func (s *PMIServer) Ops(rank int) uint64 {
	if n, ok := s.ops[rank]; ok {
		return n.Load()
	}
	return 0
}

func (s *PMIServer) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Serve accepts PMI_PORT connections on l until ctx ends or l fails. Each
// connection must start with "cmd=initack pmiid=<rank>" (PMI_ID set in the
// rank's environment). It closes l when it returns.
func (s *PMIServer) Serve(ctx context.Context, l net.Listener) error {
	return acceptLoop(ctx, l, &s.wg, func(c net.Conn) {
		if err := s.serve(ctx, c, -1); err != nil {
			s.logf("pmi: %v", err)
		}
	})
}

// ServeConn serves rank on c (the launcher's end of the rank's PMI_FD
// socketpair) until the rank finalizes and closes, the connection fails or
// ctx ends. It closes c when it returns. An error reports a protocol
// violation or an early exit.
func (s *PMIServer) ServeConn(ctx context.Context, c net.Conn, rank int) error {
	if !s.local.ranks[rank] {
		c.Close()
		return fmt.Errorf("rendezvous: rank %d is not served here", rank)
	}
	return s.serve(ctx, c, rank)
}

// Close closes every connection being served. Waiting ranks see EOF.
func (s *PMIServer) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.local.gone(errors.New("rendezvous: PMI server closed"))
	s.wg.Wait()
}

// pmiConn is the state of one rank's connection.
type pmiConn struct {
	s         *PMIServer
	c         net.Conn
	r         *bufio.Reader
	rank      int
	inited    bool
	finalized bool
	aborted   bool
	dropped   bool      // closed by the server (failed barrier, protocol error)
	spawn     *PMISpawn // the blocks of a spawn so far, until its last
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line of at most max bytes including the newline.
func readLine(r *bufio.Reader, max int) (string, error) {
	var b []byte
	for {
		chunk, err := r.ReadSlice('\n')
		b = append(b, chunk...)
		if len(b) > max {
			return "", errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		return string(b), nil
	}
}

func (s *PMIServer) serve(ctx context.Context, c net.Conn, rank int) (err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return errors.New("rendezvous: PMI server closed")
	}
	s.conns[c] = true
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	pc := &pmiConn{s: s, c: c, r: bufio.NewReaderSize(c, 4096), rank: rank}
	defer func() {
		stop()
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if pc.rank >= 0 && pc.dropped && !pc.finalized {
			// The server ended this connection: the rank has not exited,
			// but it can no longer take part in a barrier.
			s.local.gone(fmt.Errorf("rendezvous: rank %d: PMI connection dropped: %v", pc.rank, err))
		}
		if pc.rank >= 0 && !pc.finalized && !pc.aborted && !pc.dropped && !closed && ctx.Err() == nil {
			// Reported before the ranks waiting in a barrier are released:
			// they fail when it is, and their exits must not overtake the
			// report of the rank that caused it. A rank that never said
			// init is no MPI program (or not yet one): only a barrier it
			// leaves waiting fails.
			if s.cfg.OnEarlyExit != nil && pc.inited {
				s.cfg.OnEarlyExit(pc.rank)
			}
			s.local.gone(fmt.Errorf("rendezvous: rank %d exited before PMI finalize", pc.rank))
			if err == nil {
				err = fmt.Errorf("rendezvous: rank %d closed its PMI connection before finalize", pc.rank)
			}
		}
	}()
	if rank >= 0 {
		if err := s.claim(rank); err != nil {
			pc.rank = -1
			return err
		}
	}
	for {
		line, err := readLine(pc.r, s.cfg.MaxLine)
		if err == errLineTooLong {
			pc.reply(formatPMI("error", "rc", "-1", "msg", "line_too_long"))
			pc.dropped = true
			return fmt.Errorf("rendezvous: rank %d: PMI line longer than %d bytes", pc.rank, s.cfg.MaxLine)
		}
		if err != nil {
			if pc.finalized || pc.aborted || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if pc.aborted {
			continue // the job is being killed; nothing more is answered
		}
		if n := s.ops[pc.rank]; n != nil {
			n.Add(1)
		}
		done, err := pc.handle(ctx, line)
		if done {
			pc.dropped = true
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// claim marks rank as connected; a second connection for a rank is refused.
func (s *PMIServer) claim(rank int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected[rank] {
		return fmt.Errorf("rendezvous: rank %d connected twice", rank)
	}
	s.connected[rank] = true
	return nil
}

func (pc *pmiConn) reply(line string) error {
	if len(line) > PMIMaxLine-1 {
		return fmt.Errorf("rendezvous: reply of %d bytes would overflow MPICH's line buffer", len(line))
	}
	_, err := io.WriteString(pc.c, line)
	return err
}

// handle serves one request line. done means the connection should close.
func (pc *pmiConn) handle(ctx context.Context, line string) (done bool, err error) {
	m, err := parseRequest(line)
	if err != nil {
		pc.s.logf("pmi: rank %d: %v", pc.rank, err)
		pc.reply(formatPMI("error", "rc", "-1", "msg", "malformed_line"))
		return true, err
	}
	if pc.rank < 0 && m.Cmd != "initack" {
		pc.reply(formatPMI("error", "rc", "-1", "msg", "initack_required"))
		return true, fmt.Errorf("rendezvous: PMI_PORT connection sent cmd=%s before cmd=initack pmiid=", m.Cmd)
	}
	if m.Multi {
		return pc.multi(m)
	}
	switch m.Cmd {
	case "initack":
		return pc.initack(m)
	case "barrier_in":
		return pc.barrier(ctx)
	case "abort":
		pc.abort(m)
		// No reply, and keep the connection open: MPI_Abort must block
		// until the launcher kills the rank (pmi.md §6).
		return false, nil
	}
	return false, pc.reply(pc.answer(m))
}

// parseRequest parses a request line; an abort's is taken leniently, as
// its message may hold spaces.
func parseRequest(line string) (PMIMessage, error) {
	m, err := ParsePMILine(line)
	if err == nil || !strings.HasPrefix(line, "cmd=abort ") {
		return m, err
	}
	m = PMIMessage{Cmd: "abort", Args: map[string]string{}}
	for _, t := range strings.Fields(line) {
		if k, v, ok := strings.Cut(t, "="); ok && k == "exitcode" {
			m.Args[k] = v
		}
	}
	if _, msg, ok := strings.Cut(line, "error_msg="); ok {
		m.Args["error_msg"] = strings.TrimSpace(msg)
	}
	return m, nil
}

// initack serves the first command of a PMI_PORT connection, which names
// its rank (PMI_ID), and answers with the rank's place in the job.
func (pc *pmiConn) initack(m PMIMessage) (done bool, err error) {
	s := pc.s
	if pc.rank >= 0 {
		return true, fmt.Errorf("rendezvous: rank %d sent initack twice or on a PMI_FD connection", pc.rank)
	}
	id, err := m.Int("pmiid")
	if err != nil || !s.local.ranks[id] {
		pc.reply(formatPMI("error", "rc", "-1", "msg", "unknown_pmiid"))
		return true, fmt.Errorf("rendezvous: initack with unknown pmiid %q", m.Args["pmiid"])
	}
	if err := s.claim(id); err != nil {
		return true, err
	}
	pc.rank = id
	return false, pc.reply(formatPMI("initack") + formatPMI("set", "size", strconv.Itoa(s.cfg.Size)) +
		formatPMI("set", "rank", strconv.Itoa(id)) + formatPMI("set", "debug", "0"))
}

// barrier serves barrier_in: it answers once every rank of the job
// arrived, or closes the connection when the barrier fails.
func (pc *pmiConn) barrier(ctx context.Context) (done bool, err error) {
	if err := pc.s.local.barrier(ctx, pc.rank); err != nil {
		if pc.s.cfg.OnFenceError != nil {
			pc.s.cfg.OnFenceError(err)
		}
		// Closing, not replying: a barrier_out would let MPICH go on as
		// if the fence had completed.
		return true, err
	}
	return false, pc.reply(formatPMI("barrier_out"))
}

// abort serves MPI_Abort: it tells OnAbort, and nothing more is answered.
func (pc *pmiConn) abort(m PMIMessage) {
	code, err := m.Int("exitcode")
	if err != nil {
		code = 1
	}
	msg := m.Args["error_msg"]
	if msg == "" {
		msg = m.Args["msg"]
	}
	pc.aborted = true
	if pc.s.cfg.OnAbort != nil {
		pc.s.cfg.OnAbort(pc.rank, code, msg)
	}
}

// answer serves a command that one reply line answers, and returns the
// line.
func (pc *pmiConn) answer(m PMIMessage) string {
	s := pc.s
	switch m.Cmd {
	case "init":
		pc.inited = true
		return formatPMI("response_to_init", "pmi_version", "1", "pmi_subversion", "1", "rc", "0")
	case "get_maxes":
		return formatPMI("maxes", "kvsname_max", strconv.Itoa(PMIKVSNameMax),
			"keylen_max", strconv.Itoa(PMIKeyLenMax), "vallen_max", strconv.Itoa(PMIValLenMax))
	case "get_appnum":
		app, ok := s.cfg.AppNums[pc.rank]
		if !ok {
			app = s.cfg.AppNum
		}
		return formatPMI("appnum", "appnum", strconv.Itoa(app))
	case "get_my_kvsname":
		return formatPMI("my_kvsname", "kvsname", s.cfg.KVSName)
	case "get_universe_size":
		return formatPMI("universe_size", "size", strconv.Itoa(s.cfg.UniverseSize))
	case "put":
		return pc.put(m)
	case "get":
		return pc.get(m)
	case "finalize":
		pc.finalized = true
		return formatPMI("finalize_ack")
	case "publish_name", "unpublish_name", "lookup_name":
		return pc.names(m)
	}
	s.logf("pmi: rank %d: unsupported command %q", pc.rank, m.Cmd)
	return formatPMI(m.Cmd+"_result", "rc", "-1", "msg", "unsupported")
}

// put serves put: the key-value goes to the local store, within PMI's
// bounds and the budgets.
func (pc *pmiConn) put(m PMIMessage) string {
	key, value := m.Args["key"], m.Args["value"]
	switch {
	case m.Args["kvsname"] != pc.s.cfg.KVSName:
		return formatPMI("put_result", "rc", "-1", "msg", "unknown_kvsname")
	case key == "" || len(key) >= PMIKeyLenMax:
		return formatPMI("put_result", "rc", "-1", "msg", "bad_key")
	case len(value) >= PMIValLenMax:
		return formatPMI("put_result", "rc", "-1", "msg", "value_too_long")
	}
	if err := pc.s.local.put(pc.rank, key, value); err != nil {
		return formatPMI("put_result", "rc", "-1", "msg", pmiToken(err.Error(), 512))
	}
	return formatPMI("put_result", "rc", "0", "msg", "success")
}

// get serves get: a value that fits MPICH's line, or not found.
func (pc *pmiConn) get(m PMIMessage) string {
	key := m.Args["key"]
	if m.Args["kvsname"] != pc.s.cfg.KVSName {
		return formatPMI("get_result", "rc", "-1", "msg", "unknown_kvsname", "value", "unknown")
	}
	if v, ok := pc.s.local.get(key); ok {
		r := formatPMI("get_result", "rc", "0", "msg", "success", "value", v)
		if len(r) <= PMIMaxLine-1 {
			return r
		}
	}
	r := formatPMI("get_result", "rc", "-1", "msg", "key_"+key+"_not_found", "value", "unknown")
	if len(r) > PMIMaxLine-1 {
		r = formatPMI("get_result", "rc", "-1", "msg", "key_not_found", "value", "unknown")
	}
	return r
}

// names serves publish_name, unpublish_name and lookup_name through
// Names, where the server has it.
func (pc *pmiConn) names(m PMIMessage) string {
	op := strings.TrimSuffix(m.Cmd, "_name")
	if pc.s.cfg.Names == nil {
		return formatPMI(op+"_result", "rc", "1", "msg", "not_supported")
	}
	port, err := pc.s.cfg.Names(pc.rank, op, m.Args["service"], m.Args["port"])
	switch {
	case err != nil:
		return formatPMI(op+"_result", "rc", "-1", "msg", pmiToken(err.Error(), 512))
	case op == "lookup" && pmiValueOK(port) && len(port) < PMIValLenMax:
		return formatPMI(op+"_result", "port", port, "info", "ok", "rc", "0", "msg", "success")
	case op == "lookup":
		return formatPMI(op+"_result", "rc", "-1", "msg", "port_cannot_travel_over_PMI")
	}
	return formatPMI(op+"_result", "info", "ok", "rc", "0", "msg", "success")
}

// maxSpawnLines bounds a multi-line command block.
const maxSpawnLines = 4096

// PMISpawn is one PMI_Spawn_multiple of MPICH's simple PMI: its programs
// (one mcmd=spawn block each) and the key-values the spawner puts into its
// children's KVS (preput: PARENT_ROOT_PORT_NAME).
type PMISpawn struct {
	Apps   []PMISpawnApp
	Preput map[string]string
}

// PMISpawnApp is one program of a spawn: execname, its arguments, nprocs,
// and its info keys in the order given.
type PMISpawnApp struct {
	Exec   string
	Args   []string
	NProcs int
	Info   [][2]string
}

// multi reads a multi-line (mcmd=) block up to its endcmd line, so the
// stream stays in sync. A spawn's blocks (totspawns of them, one per
// program) are collected, and the last one answered: by Spawn, or refused.
// Any other block is refused.
func (pc *pmiConn) multi(m PMIMessage) (bool, error) {
	kv := map[string]string{}
	var order []string
	for n, ended := 0, false; !ended; n++ {
		if n >= maxSpawnLines {
			return true, fmt.Errorf("rendezvous: rank %d: mcmd=%s block without endcmd", pc.rank, m.Cmd)
		}
		line, err := readLine(pc.r, pc.s.cfg.MaxLine)
		if err != nil {
			return true, err
		}
		line = strings.TrimSuffix(line, "\n")
		if ended = strings.TrimSpace(line) == "endcmd"; !ended {
			// One key=value a line; a value (an argument) may hold spaces.
			if k, v, ok := strings.Cut(line, "="); ok {
				kv[k] = v
				order = append(order, k)
			}
		}
	}
	if m.Cmd != "spawn" {
		pc.s.logf("pmi: rank %d: mcmd=%s is not supported", pc.rank, m.Cmd)
		return false, pc.reply(formatPMI(m.Cmd+"_result", "rc", "-1", "msg", "not_supported"))
	}
	for k, v := range m.Args {
		kv[k] = v
	}
	app, total, err := spawnBlock(kv, order)
	if err != nil {
		pc.spawn = nil
		pc.s.logf("pmi: rank %d: %v", pc.rank, err)
		return false, pc.reply(formatPMI("spawn_result", "rc", "-1", "msg", pmiToken(err.Error(), 512)))
	}
	if pc.spawn == nil {
		pc.spawn = &PMISpawn{Preput: map[string]string{}}
	}
	pc.spawn.Apps = append(pc.spawn.Apps, app)
	for i := range atoiOr(kv["preput_num"], 0) {
		pc.spawn.Preput[kv["preput_key_"+strconv.Itoa(i)]] = kv["preput_val_"+strconv.Itoa(i)]
	}
	if len(pc.spawn.Apps) < total {
		return false, nil // the next block follows; one answer for all
	}
	sp := *pc.spawn
	pc.spawn = nil
	if pc.s.cfg.Spawn == nil {
		pc.s.logf("pmi: rank %d: MPI_Comm_spawn is not served here", pc.rank)
		return false, pc.reply(formatPMI("spawn_result", "rc", "-1", "msg", "not_supported"))
	}
	if err := pc.s.cfg.Spawn(pc.rank, sp); err != nil {
		return false, pc.reply(formatPMI("spawn_result", "rc", "-1", "msg", pmiToken(err.Error(), 512)))
	}
	return false, pc.reply(formatPMI("spawn_result", "rc", "0"))
}

// spawnBlock reads one mcmd=spawn block's key-values (order: the keys as
// they came): its program, and how many blocks the spawn has.
func spawnBlock(kv map[string]string, order []string) (PMISpawnApp, int, error) {
	app := PMISpawnApp{Exec: kv["execname"]}
	var err error
	if app.NProcs, err = strconv.Atoi(kv["nprocs"]); err != nil || app.NProcs < 1 {
		return app, 0, fmt.Errorf("spawn: bad nprocs %q", truncate(kv["nprocs"], 20))
	}
	if app.Exec == "" {
		return app, 0, errors.New("spawn: no execname")
	}
	total := atoiOr(kv["totspawns"], 1)
	if total < 1 || total > 1024 {
		return app, 0, fmt.Errorf("spawn: bad totspawns %q", truncate(kv["totspawns"], 20))
	}
	argc := atoiOr(kv["argcnt"], 0)
	if argc < 0 || argc > maxSpawnLines {
		return app, 0, fmt.Errorf("spawn: bad argcnt %q", truncate(kv["argcnt"], 20))
	}
	for i := 1; i <= argc; i++ {
		app.Args = append(app.Args, kv["arg"+strconv.Itoa(i)])
	}
	for i := range atoiOr(kv["info_num"], 0) {
		k, ok := kv["info_key_"+strconv.Itoa(i)]
		if !ok || i >= maxSpawnLines {
			break
		}
		app.Info = append(app.Info, [2]string{k, kv["info_val_"+strconv.Itoa(i)]})
	}
	return app, total, nil
}

// atoiOr is s as an integer, or def.
func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}
