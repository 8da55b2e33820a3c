package output

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Stream identifies one output stream of a rank.
type Stream uint8

const (
	// Stdout is a rank's standard output.
	Stdout Stream = 1
	// Stderr is a rank's standard error.
	Stderr Stream = 2
)

// String returns "stdout", "stderr" or "stream(N)".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "stream(" + strconv.Itoa(int(s)) + ")"
}

// TimestampLayout is the time format of the per-line timestamp prefix; the
// time is converted to UTC and followed by a space.
const TimestampLayout = "2006-01-02T15:04:05.000000Z07:00"

// OpenMPITimestampLayout is the time format of the per-line timestamp
// prefix in [StyleOpenMPI]: C's ctime without its newline, in local time,
// as Open MPI's mpirun --timestamp-output prints it ("Wed Dec  2
// 00:30:56 2026"), followed directly by the tag or "<stdout>:".
const OpenMPITimestampLayout = "Mon Jan _2 15:04:05 2006"

// Style is whose formats a Mux's tags, timestamps and files follow: the
// launcher a personality copies (gorun mpirun: Open MPI's).
type Style uint8

const (
	// StyleGorun is gorun's own: tags "[rank] " (or "[host:rank] "),
	// timestamps in TimestampLayout, and files Dir/rank.<r>/stdout and
	// stderr, byte-exact, without tags.
	StyleGorun Style = iota
	// StyleOpenMPI is Open MPI 4.1 mpirun's. Tags are "[1,rank]<stdout>:"
	// and "[1,rank]<stderr>:" ("1" is mpirun's job); timestamps are in
	// OpenMPITimestampLayout, local time, and run into the tag, or into
	// "<stdout>:" without Tag. Files are Dir/1/rank.<r>/stdout and
	// stderr (Dir/rank.<r> with FlatDir), r zero-padded to as many
	// digits as Ranks has; New creates every rank's two files empty (an
	// earlier job's are emptied), and lines in them carry the same
	// prefixes as on gorun's outputs. Merged lines are tagged "[0-7] "
	// as in StyleGorun.
	StyleOpenMPI
)

// OpenMPIJob is the job directory of StyleOpenMPI's files: Open MPI
// names it by mpirun's job, which is 1 for the job a mpirun launches.
const OpenMPIJob = "1"

// DefaultFlushDelay is the FlushDelay used when Options.FlushDelay is 0.
const DefaultFlushDelay = 100 * time.Millisecond

// MaxPartial is the largest partial line (bytes without a newline) kept per
// rank and stream; a longer one is written out at once.
const MaxPartial = 64 << 10

// batchMax bounds the per-output batch buffer; larger data is written directly.
const batchMax = 64 << 10

// ErrClosed is returned by Write and CloseRank after Close.
var ErrClosed = errors.New("output: mux closed")

// Options configures a Mux.
type Options struct {
	// SameTerminal says that Stdout and Stderr reach the same screen (or
	// file), so that Notice must also end a line left open on Stdout.
	SameTerminal bool

	// Stdout and Stderr are gorun's own outputs; nil means os.Stdout and
	// os.Stderr. In directory mode only Stderr is used, by Notice. If
	// both are the same (comparable) writer, line state is shared between
	// the two streams.
	Stdout, Stderr io.Writer
	// Tag prefixes every line with "[rank] ".
	Tag bool
	// TagHost prefixes every line with "[host:rank] " instead; it implies Tag.
	// Without a Host function the prefix is "[rank] ".
	TagHost bool
	// Host returns the host name of a rank, for tags. It is called once per
	// (rank, stream) with the Mux's lock held, so it must be cheap and must
	// not call the Mux. Nil means no host.
	Host func(rank int) string
	// Label, if set, says which job a rank number belongs to and its rank
	// there: job 0 is the job's own (rank as it is); job j > 0 is the
	// j-th job its ranks spawned (MPI_Comm_spawn), whose ranks are
	// numbered after the job's own. A spawned rank's tag is "[j:rank] "
	// ("[host:j:rank] " with TagHost), Open MPI's "[1+j,rank]<stdout>:",
	// and its files are Dir/rank.j.rank (Open MPI's Dir/1+j/rank.rank).
	Label func(rank int) (job, jobRank int)
	// Timestamp prefixes every line, before the tag, with the time the rank
	// wrote its first byte (the t passed to Write) in TimestampLayout, UTC,
	// followed by a space (StyleOpenMPI: OpenMPITimestampLayout).
	Timestamp bool
	// Style is whose formats tags, timestamps and files follow; the zero
	// value is gorun's own.
	Style Style
	// Dir, if set, sends rank r's streams to Dir/rank.<r>/stdout and
	// Dir/rank.<r>/stderr instead of gorun's outputs (StyleOpenMPI: see
	// there). Files (mode 0644) and directories (0755; StyleOpenMPI:
	// 0750) are created as needed, opened on the first write and
	// appended to. Bytes are written straight through, without tags or
	// line buffering; with Timestamp each line in a file is still prefixed
	// (a file that ends mid-line is continued without a prefix).
	Dir string
	// Tee, with Dir, sends the ranks' streams to gorun's outputs too, as
	// without Dir: Open MPI's --output-filename prints to the terminal
	// as well.
	Tee bool
	// FlatDir, in StyleOpenMPI, leaves out the job's directory: files
	// are Dir/rank.<r>/stdout and stderr (Open MPI's DIR:nojobid).
	FlatDir bool
	// FlushDelay is how long a partial line waits for its newline before it
	// is written anyway; 0 (or negative) means DefaultFlushDelay.
	FlushDelay time.Duration

	// Merge collapses identical lines that several ranks print within
	// MergeWindow into one line tagged with their ranks (see the package
	// documentation, "Merging"); every other line is tagged with its
	// rank, as with Tag. It applies to gorun's own outputs only; it is
	// ignored in directory mode without Tee.
	Merge bool
	// MergeWindow is how long the first line of a group waits for the
	// other ranks' identical lines; 0 (or negative) means
	// DefaultMergeWindow.
	MergeWindow time.Duration
	// Ranks is the number of ranks of the job (0 to Ranks-1). With Merge,
	// a line that every rank still running has printed is written at once
	// instead of after MergeWindow; 0 means unknown, and every group waits
	// for its window. [Mux.SetRanks] changes it.
	Ranks int
	// Only, if not nil, lists the ranks whose output this Mux gets, when
	// they are not all of the job's (an agent that prints its own host's
	// ranks): with Merge, a line that every one of them still running
	// has printed is written at once. Ranks still sizes StyleOpenMPI's
	// file names.
	Only []int
}

// FileError is a failure of a rank's file in directory mode
// (Options.Dir): that rank's output to it is lost.
type FileError struct {
	Rank   int    // the rank whose file failed
	Stream Stream // which of its files
	Err    error  // what failed; its message names the file
}

// Error returns "output: " and the failure.
func (e *FileError) Error() string { return "output: " + e.Err.Error() }

// Unwrap returns e.Err.
func (e *FileError) Unwrap() error { return e.Err }

// key identifies one (rank, stream).
type key struct {
	rank int
	s    Stream
}

// outState is one of gorun's outputs with its line state.
type outState struct {
	w        io.Writer
	buf      []byte // batch of bytes to write in one call
	midLine  bool   // prefixed mode: cursor is inside a line owned by owner
	owner    key
	err      error // first write error; later writes are discarded
	reported bool  // err has been returned to a caller
	last     byte  // the last byte written to w, 0 before any
}

// rankState is the state of one (rank, stream).
type rankState struct {
	k        key
	out      *outState
	tag      []byte    // "[host:rank] " or "[rank] " (or the style's) or nil
	ftag     []byte    // the prefix after the timestamp in a file (StyleOpenMPI), or nil
	pend     []byte    // pending partial line, not yet written
	pendT    time.Time // time of the first pending byte
	deadline time.Time // when pend must be flushed
	dirty    bool      // in Mux.dirty
	fresh    bool      // pend became non-empty in this Write: set deadline
	cont     bool      // merge mode: the start of the current line was written

	// Directory mode.
	f           *os.File
	ferr        error
	freported   bool
	atLineStart bool
}

// Mux multiplexes the output streams of many ranks. All methods are safe for
// concurrent use.
type Mux struct {
	o        Options
	delay    time.Duration
	prefixed bool           // Tag, Timestamp or Merge on gorun's outputs
	fileOnly bool           // Dir without Tee: nothing goes to gorun's outputs
	loc      *time.Location // StyleOpenMPI's timestamps' zone
	made     int            // StyleOpenMPI: ranks below this have their files

	now func() time.Time // the clock of deadlines and merge windows

	mu      sync.Mutex
	outs    [3]*outState // indexed by Stream
	ranks   map[key]*rankState
	dirty   map[*rankState]struct{}
	mg      *merger   // with Options.Merge, on gorun's outputs; else nil
	armedAt time.Time // the flusher wakes by then (zero: no deadline pending)
	closed  bool
	tsT     time.Time // cache for the last formatted timestamp
	tsB     []byte
	fbuf    []byte // directory mode batch buffer

	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
}

// New returns a Mux for o. In directory mode it creates o.Dir. Otherwise it
// starts the flusher goroutine, which Close stops.
func New(o Options) (*Mux, error) {
	m := &Mux{
		o:        o,
		delay:    o.FlushDelay,
		prefixed: o.Tag || o.TagHost || o.Timestamp || o.Merge,
		fileOnly: o.Dir != "" && !o.Tee,
		loc:      time.Local,
		now:      time.Now,
		ranks:    make(map[key]*rankState),
		dirty:    make(map[*rankState]struct{}),
	}
	if m.delay <= 0 {
		m.delay = DefaultFlushDelay
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, m.dirMode()); err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		if err := m.makeFiles(o.Ranks); err != nil {
			return nil, err
		}
	}
	if m.fileOnly {
		// gorun's own messages still go to its stderr.
		m.outs[Stderr] = &outState{w: o.Stderr}
		return m, nil
	}
	m.outs[Stdout] = &outState{w: o.Stdout}
	if sameWriter(o.Stdout, o.Stderr) {
		m.outs[Stderr] = m.outs[Stdout]
	} else {
		m.outs[Stderr] = &outState{w: o.Stderr}
	}
	if o.Merge {
		m.mg = newMerger(o.MergeWindow, o.Ranks, o.Only)
	}
	m.wake = make(chan struct{}, 1)
	m.done = make(chan struct{})
	m.stopped = make(chan struct{})
	go m.flusher()
	return m, nil
}

// sameWriter reports whether a and b are the same writer, without panicking
// on non-comparable dynamic types.
func sameWriter(a, b io.Writer) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// Write delivers chunk p of rank's stream s, written by the rank at time t.
// p is not retained (what is kept is copied). It returns the first error of
// the output that s goes to (gorun's output or the rank's file) once; after
// such an error data for that output is accepted and discarded.
func (m *Mux) Write(rank int, s Stream, t time.Time, p []byte) error {
	if s != Stdout && s != Stderr {
		return fmt.Errorf("output: invalid stream %d", s)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	st := m.state(rank, s)
	var ferr error
	if m.o.Dir != "" {
		m.writeFile(st, t, p)
		if ferr = st.report(); m.fileOnly {
			return ferr
		}
	}
	if len(p) > 0 {
		switch {
		case m.mg != nil:
			m.writeMerged(st, t, p)
			m.flushOuts()
		case m.prefixed:
			m.writePrefixed(st, t, p)
			st.out.flush()
		default:
			m.writeRaw(st, p)
			st.out.flush()
		}
		if len(st.pend) == 0 {
			st.fresh = false
			m.clean(st)
		} else if st.fresh {
			// A new partial line started: its own delay starts now.
			st.fresh = false
			st.deadline = m.now().Add(m.delay)
			if !st.dirty {
				st.dirty = true
				m.dirty[st] = struct{}{}
			}
			m.arm(st.deadline)
		}
	}
	if err := st.out.report(); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// arm makes sure that the flusher wakes by deadline d: an armed flusher
// with an earlier deadline is left alone, otherwise it is woken up to
// look again.
func (m *Mux) arm(d time.Time) {
	if !m.armedAt.IsZero() && !d.Before(m.armedAt) {
		return
	}
	m.armedAt = d
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// flushOuts writes the batches of gorun's outputs.
func (m *Mux) flushOuts() {
	for _, out := range m.outs[1:] {
		if out != nil {
			out.flush()
		}
	}
}

// state returns the state of (rank, s), creating it.
func (m *Mux) state(rank int, s Stream) *rankState {
	k := key{rank, s}
	st := m.ranks[k]
	if st != nil {
		return st
	}
	st = &rankState{k: k, out: m.outs[s], atLineStart: true}
	tag := m.o.Tag || m.o.TagHost
	if tag || m.o.Merge && !m.fileOnly {
		st.tag = m.tagOf(k)
	} else if m.o.Timestamp && m.o.Style == StyleOpenMPI {
		st.tag = streamTag(nil, s)
	}
	if m.o.Style == StyleOpenMPI && m.o.Dir != "" {
		switch {
		case tag:
			st.ftag = m.tagOf(k)
		case m.o.Timestamp:
			st.ftag = streamTag(nil, s)
		}
	}
	m.ranks[k] = st
	return st
}

// tagOf is k's tag: "[host:rank] " (TagHost, with a host) or "[rank] ";
// in StyleOpenMPI "[1,rank]<stdout>:".
func (m *Mux) tagOf(k key) []byte {
	job, rank := m.label(k.rank)
	if m.o.Style == StyleOpenMPI {
		b := append([]byte("["+strconv.Itoa(1+job)+","), strconv.Itoa(rank)...)
		return streamTag(append(b, ']'), k.s)
	}
	host := ""
	if m.o.TagHost && m.o.Host != nil {
		host = m.o.Host(k.rank)
	}
	b := []byte{'['}
	if host != "" {
		b = append(b, host...)
		b = append(b, ':')
	}
	if job > 0 {
		b = strconv.AppendInt(b, int64(job), 10)
		b = append(b, ':')
	}
	b = strconv.AppendInt(b, int64(rank), 10)
	return append(b, ']', ' ')
}

// streamTag appends Open MPI's name of stream s: "<stdout>:".
func streamTag(b []byte, s Stream) []byte {
	return append(append(append(b, '<'), s.String()...), '>', ':')
}

// clean removes st from the flusher's set.
func (m *Mux) clean(st *rankState) {
	if st.dirty {
		st.dirty = false
		delete(m.dirty, st)
	}
}

// writeRaw handles a chunk in pass-through mode: everything up to and
// including the last newline is written at once with the pending prefix; the
// rest becomes pending unless that would exceed MaxPartial.
func (m *Mux) writeRaw(st *rankState, p []byte) {
	out := st.out
	cut := bytes.LastIndexByte(p, '\n') + 1
	if len(st.pend)+len(p)-cut > MaxPartial {
		cut = len(p)
	}
	if cut > 0 {
		if len(st.pend) == 0 && len(out.buf) == 0 {
			out.write(p[:cut]) // fast path: no copy
		} else {
			out.put(st.pend)
			out.put(p[:cut])
			st.pend = st.pend[:0]
		}
	}
	if len(st.pend) == 0 && cut < len(p) {
		st.fresh = true
	}
	st.pend = append(st.pend, p[cut:]...)
}

// writePrefixed handles a chunk in tagged or timestamped mode.
func (m *Mux) writePrefixed(st *rankState, t time.Time, p []byte) {
	out := st.out
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			break
		}
		m.lineStart(st, t)
		if len(st.pend) > 0 {
			out.put(st.pend)
			st.pend = st.pend[:0]
		}
		out.put(p[:i+1])
		out.midLine = false
		p = p[i+1:]
	}
	if st.hold(p, t) {
		return
	}
	m.lineStart(st, t)
	out.put(st.pend)
	out.put(p)
	st.pend = st.pend[:0]
	out.midLine, out.owner = true, st.k
}

// hold keeps p, the start of a line that arrived at t, to be written
// with the rest of its line; it reports false, keeping nothing, when the
// partial line would grow over MaxPartial (the caller writes it out).
// Nothing (p empty) is held.
func (st *rankState) hold(p []byte, t time.Time) bool {
	if len(p) == 0 {
		return true
	}
	if len(st.pend) == 0 {
		st.pendT = t
		st.fresh = true
	}
	if len(st.pend)+len(p) <= MaxPartial {
		st.pend = append(st.pend, p...)
		return true
	}
	return false
}

// lineStart prepares st's output for bytes of st: nothing if st owns the
// current partial output line; otherwise it ends another rank's partial line
// and writes st's prefix. The prefix time is that of the first pending byte,
// or t.
func (m *Mux) lineStart(st *rankState, t time.Time) {
	out := st.out
	if out.midLine {
		if out.owner == st.k {
			return
		}
		out.put([]byte{'\n'})
		out.midLine = false
	}
	if out.err != nil {
		return
	}
	if m.o.Timestamp {
		if len(st.pend) > 0 {
			t = st.pendT
		}
		out.buf = append(out.buf, m.timestamp(t)...)
	}
	out.buf = append(out.buf, st.tag...)
}

// timestamp returns the formatted prefix for t (cached for repeated times).
func (m *Mux) timestamp(t time.Time) []byte {
	if len(m.tsB) == 0 || !t.Equal(m.tsT) {
		m.tsT = t
		if m.o.Style == StyleOpenMPI {
			m.tsB = t.In(m.loc).AppendFormat(m.tsB[:0], OpenMPITimestampLayout)
		} else {
			m.tsB = append(t.UTC().AppendFormat(m.tsB[:0], TimestampLayout), ' ')
		}
	}
	return m.tsB
}

// flushPartial writes st's pending partial line. If final, a partial output
// line owned by st is ended with a newline (prefixed mode only).
func (m *Mux) flushPartial(st *rankState, final bool) {
	out := st.out
	if len(st.pend) > 0 {
		if m.mg != nil {
			// The rank's complete lines held for merging go first.
			m.forceRank(st.k)
			st.cont = !final
		}
		if m.prefixed {
			m.lineStart(st, st.pendT)
			out.midLine, out.owner = true, st.k
		}
		out.put(st.pend)
		st.pend = st.pend[:0]
	}
	if final && m.prefixed && out.midLine && out.owner == st.k {
		out.put([]byte{'\n'})
		out.midLine = false
	}
	m.clean(st)
}

// flusher writes partial lines whose FlushDelay has passed, and merged
// lines whose MergeWindow has.
func (m *Mux) flusher() {
	defer close(m.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-m.wake:
		case <-timer.C:
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		next := m.expire(m.now())
		m.mu.Unlock()
		if !next.IsZero() {
			timer.Reset(next.Sub(m.now()))
		}
	}
}

// expire writes what is due at now: partial lines whose FlushDelay has
// passed and merge groups whose window has. It returns the next deadline
// (zero if none) and arms the flusher for it.
func (m *Mux) expire(now time.Time) time.Time {
	var next time.Time
	for st := range m.dirty {
		if !st.deadline.After(now) {
			m.flushPartial(st, false)
		} else if next.IsZero() || st.deadline.Before(next) {
			next = st.deadline
		}
	}
	if m.mg != nil {
		m.drain(now)
		if d := m.mg.nextDue(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	m.flushOuts()
	m.armedAt = next
	return next
}

// CloseRank records that rank has exited: its partial lines are written now
// (ended with a newline only in tagged or timestamped mode) and its files, in
// directory mode, are closed. Data written for rank afterwards starts afresh.
func (m *Mux) CloseRank(rank int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.mg != nil {
		m.mg.ended(rank)
	}
	var errs []error
	for _, s := range []Stream{Stdout, Stderr} {
		st := m.ranks[key{rank, s}]
		if st == nil {
			continue
		}
		errs = append(errs, m.closeState(st))
	}
	if m.mg != nil {
		// A group that waited for this rank may be complete now.
		m.drain(m.now())
		m.flushOuts()
	}
	return errors.Join(errs...)
}

// closeState flushes or closes st and forgets it.
func (m *Mux) closeState(st *rankState) error {
	delete(m.ranks, st.k)
	var ferr error
	if m.o.Dir != "" {
		if st.f != nil {
			if err := st.f.Close(); err != nil && st.ferr == nil {
				st.ferr = &FileError{Rank: st.k.rank, Stream: st.k.s, Err: err}
			}
			st.f = nil
		}
		if ferr = st.report(); m.fileOnly {
			return ferr
		}
	}
	m.flushPartial(st, true)
	st.out.flush()
	if err := st.out.report(); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// Close writes out everything pending (partial lines are ended with a
// newline in tagged or timestamped mode), stops the flusher and closes all
// files. It returns errors not yet returned by Write or CloseRank. It does not
// close Options.Stdout or Options.Stderr. Later calls return nil.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	if m.mg != nil {
		m.drainAll()
	}
	states := make([]*rankState, 0, len(m.ranks))
	for _, st := range m.ranks {
		states = append(states, st)
	}
	slices.SortFunc(states, func(a, b *rankState) int {
		if c := cmp.Compare(a.k.rank, b.k.rank); c != 0 {
			return c
		}
		return cmp.Compare(a.k.s, b.k.s)
	})
	var errs []error
	for _, st := range states {
		errs = append(errs, m.closeState(st))
	}
	for _, out := range m.outs[1:] {
		if out != nil {
			out.flush()
			errs = append(errs, out.report())
		}
	}
	m.mu.Unlock()
	if m.done != nil {
		close(m.done)
		<-m.stopped
	}
	return errors.Join(errs...)
}

// label is the job and the rank there of a rank number (Options.Label).
func (m *Mux) label(rank int) (job, jobRank int) {
	if m.o.Label == nil {
		return 0, rank
	}
	return m.o.Label(rank)
}

// rankDir is the directory of rank's files in directory mode.
func (m *Mux) rankDir(id int) string {
	job, rank := m.label(id)
	if m.o.Style != StyleOpenMPI {
		if job > 0 {
			return filepath.Join(m.o.Dir, "rank."+strconv.Itoa(job)+"."+strconv.Itoa(rank))
		}
		return filepath.Join(m.o.Dir, "rank."+strconv.Itoa(rank))
	}
	// Open MPI pads the rank to as many digits as the job's size has:
	// rank.0 to rank.8 for 9 ranks, rank.00 to rank.09 for 10.
	name := fmt.Sprintf("rank.%0*d", len(strconv.Itoa(max(m.o.Ranks, 1))), rank)
	if job > 0 {
		name = "rank." + strconv.Itoa(rank)
	}
	if m.o.FlatDir && job == 0 {
		return filepath.Join(m.o.Dir, name)
	}
	return filepath.Join(m.o.Dir, strconv.Itoa(1+job), name)
}

// dirMode is the mode of the directories made in directory mode.
func (m *Mux) dirMode() os.FileMode {
	if m.o.Style == StyleOpenMPI {
		return 0o750
	}
	return 0o755
}

// makeFiles creates, empty, the files of ranks m.made to n-1 in
// StyleOpenMPI (as Open MPI creates every rank's two files as it starts
// the job, emptying an earlier job's), and returns the first error,
// naming the file.
func (m *Mux) makeFiles(n int) error {
	if m.o.Style != StyleOpenMPI {
		return nil
	}
	for ; m.made < n; m.made++ {
		dir := m.rankDir(m.made)
		if err := os.MkdirAll(dir, m.dirMode()); err != nil {
			return fmt.Errorf("output: %w", err)
		}
		for _, s := range []Stream{Stdout, Stderr} {
			f, err := os.OpenFile(filepath.Join(dir, s.String()), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return fmt.Errorf("output: %w", err)
			}
			f.Close()
		}
	}
	return nil
}

// filePrefixed reports whether lines in st's file start with a prefix.
func (m *Mux) filePrefixed(st *rankState) bool { return m.o.Timestamp || len(st.ftag) > 0 }

// writeFile writes p to st's file in directory mode.
func (m *Mux) writeFile(st *rankState, t time.Time, p []byte) {
	if st.ferr != nil || len(p) == 0 {
		return
	}
	prefixed := m.filePrefixed(st)
	if st.f == nil {
		fail := func(err error) { st.ferr = &FileError{Rank: st.k.rank, Stream: st.k.s, Err: err} }
		dir := m.rankDir(st.k.rank)
		if err := os.MkdirAll(dir, m.dirMode()); err != nil {
			fail(err)
			return
		}
		flag := os.O_WRONLY
		if prefixed {
			flag = os.O_RDWR // to read the last byte
		}
		f, err := os.OpenFile(filepath.Join(dir, st.k.s.String()), flag|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fail(err)
			return
		}
		st.f = f
		if prefixed {
			// Continue a line left unfinished by an earlier writer
			// without a prefix in its middle.
			var last [1]byte
			if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
				if _, err := f.ReadAt(last[:], fi.Size()-1); err == nil {
					st.atLineStart = last[0] == '\n'
				}
			}
		}
	}
	if !prefixed {
		st.fileWrite(p)
		return
	}
	b := m.fbuf[:0]
	for len(p) > 0 && st.ferr == nil {
		if st.atLineStart {
			if m.o.Timestamp {
				b = append(b, m.timestamp(t)...)
			}
			b = append(b, st.ftag...)
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b = append(b, p...)
			st.atLineStart = false
			break
		}
		b = append(b, p[:i+1]...)
		st.atLineStart = true
		p = p[i+1:]
		if len(b) >= batchMax {
			st.fileWrite(b)
			b = b[:0]
		}
	}
	if len(b) > 0 {
		st.fileWrite(b)
	}
	if cap(b) <= 4*batchMax {
		m.fbuf = b[:0]
	}
}

// fileWrite writes b to st's file, recording the first error.
func (st *rankState) fileWrite(b []byte) {
	if st.ferr != nil {
		return
	}
	if _, err := st.f.Write(b); err != nil {
		st.ferr = &FileError{Rank: st.k.rank, Stream: st.k.s, Err: err}
	}
}

// report returns st's file error once.
func (st *rankState) report() error {
	if st.ferr != nil && !st.freported {
		st.freported = true
		return st.ferr
	}
	return nil
}

// put appends b to the output's batch, writing the batch first if b would
// make it too large, and writing a large b directly.
func (o *outState) put(b []byte) {
	if o.err != nil || len(b) == 0 {
		return
	}
	if len(o.buf)+len(b) > batchMax {
		o.flush()
		if len(b) > batchMax {
			o.write(b)
			return
		}
	}
	o.buf = append(o.buf, b...)
}

// flush writes the output's batch.
func (o *outState) flush() {
	if len(o.buf) > 0 {
		o.write(o.buf)
		o.buf = o.buf[:0]
	}
}

// write writes b, recording the first error; after it, data is discarded.
func (o *outState) write(b []byte) {
	if o.err != nil {
		return
	}
	n, err := o.w.Write(b)
	if n > 0 {
		o.last = b[n-1]
	}
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		o.err = err
		o.buf = nil
	}
}

// Notice writes a message of gorun's own to its stderr (msg should end in
// a newline) on a line of its own: if a rank's unfinished line was written
// there last, a newline comes first, and in tagged mode that rank's
// continuation starts with its prefix again. It may be called after Close.
func (m *Mux) Notice(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.outs[Stderr]
	if out == nil {
		return
	}
	if m.mg != nil {
		// The ranks' lines that arrived before the message come before it.
		m.drainAll()
		m.flushOuts()
	}
	if so := m.outs[Stdout]; so != nil && so != out && m.o.SameTerminal {
		// Both land on one screen: end the line a rank left open there.
		so.flush()
		if so.last != 0 && so.last != '\n' {
			so.write([]byte{'\n'})
			so.last = '\n'
		}
		so.midLine = false
	}
	out.flush()
	if out.last != 0 && out.last != '\n' {
		out.write([]byte{'\n'})
	}
	out.midLine = false
	out.write([]byte(msg))
}

// report returns the output's error once.
func (o *outState) report() error {
	if o.err != nil && !o.reported {
		o.reported = true
		return o.err
	}
	return nil
}
