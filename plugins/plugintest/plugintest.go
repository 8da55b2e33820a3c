// Package plugintest is what `gorun plugins test` runs against a plugin
// binary: gorun's transport contract suite (transport/transporttest)
// through the real plugin path (a go-plugin subprocess, the shared rings),
// again with the plugin's connections handed to the rank when the plugin
// can (sdk.Handoff), and a probe of its latency and bandwidth between two plugin processes.
//
// The suite needs package testing, which only runs inside a test binary's
// main: gorun therefore runs it in a child of itself, started by Run with
// EnvPath set, whose main calls Main. The suite's own peer processes are
// more such children.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/internal/memcontract"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/transporttest"
)

// EnvPath, set to a plugin binary's path, makes gorun's main run the suite
// (Main) instead of gorun.
const EnvPath = "GORUN_PLUGINS_TEST"

// EnvIface is the interface the suite's plugins are given (Options.Iface).
const EnvIface = "GORUN_PLUGINS_TEST_IFACE"

// DefaultIface keeps the suite and the probe on loopback: they run on one
// host, and a plugin left to choose could pick any interface.
const DefaultIface = "lo"

// quickTests are the contract tests --quick runs (a preflight): the ones
// that show a plugin starts, connects and moves messages right.
const quickTests = "^(Contract|Handoff)$/^(HandleRoundTrip|Sizes|OrderPerTag|BadHandle|BothDirections)$"

// Options say how to run the suite.
type Options struct {
	// Quick runs a subset with short sizes.
	Quick bool
	// Verbose prints every test as it runs.
	Verbose bool
	// Iface is the interface the plugins are given (default lo).
	Iface string
	// Stdout and Stderr receive the suite's report.
	Stdout, Stderr io.Writer
	// Memory runs the device memory contract (sdk.Memory) instead of the
	// transport's.
	Memory bool
}

// Run runs the contract suite against the plugin at path in a child of
// this program (self, usually os.Executable()) and reports whether it
// passed.
func Run(ctx context.Context, self, path string, o Options) error {
	args := []string{"-test.count=1", "-test.timeout=10m"}
	switch {
	case o.Memory:
		args = append(args, "-test.run=^Memory$")
	case o.Quick:
		args = append(args, "-test.short", "-test.run="+quickTests)
	default:
		args = append(args, "-test.run=^(Contract|Handoff)$")
	}
	if o.Verbose {
		args = append(args, "-test.v")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	if o.Iface == "" {
		o.Iface = DefaultIface
	}
	cmd.Env = append(os.Environ(), EnvPath+"="+path, EnvIface+"="+o.Iface)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("plugin %s failed the transport contract", path)
		}
		return fmt.Errorf("running the contract suite: %w", err)
	}
	return nil
}

// Main runs the suite against the plugin at path, with the -test.* flags
// of os.Args, and exits. gorun's main calls it when EnvPath is set.
func Main(path string) {
	iface := os.Getenv(EnvIface)
	if iface == "" {
		iface = DefaultIface
	}
	opener := func(handoff bool) func(t *testing.T) transport.Transport {
		return func(t *testing.T) transport.Transport {
			tr, err := plugins.OpenTransport(plugins.Options{Path: path, Iface: iface, Rank: -1, Size: -1, LocalRank: -1, NoHandoff: !handoff})
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}
	}
	tests := []testing.InternalTest{
		// The plugin's own data path, even where it could hand off.
		{Name: "Contract", F: func(t *testing.T) { transporttest.Run(t, opener(false)) }},
		// Its connections handed to the rank (sdk.Handoff).
		{Name: "Handoff", F: func(t *testing.T) {
			tr, err := plugins.OpenTransport(plugins.Options{Path: path, Iface: iface, Rank: -1, Size: -1, LocalRank: -1})
			if err != nil {
				t.Fatal(err)
			}
			handsOff := tr.HandsOff()
			tr.Close()
			if !handsOff {
				t.Skip("the plugin does not hand its connections off (sdk.Handoff)")
			}
			transporttest.Run(t, opener(true))
		}},
		// Device memory, between two plugin processes.
		{Name: "Memory", F: func(t *testing.T) { memcontract.Run(t, memOpener(path), true) }},
	}
	testing.Main(func(pat, s string) (bool, error) { return regexp.MatchString(pat, s) }, tests, nil, nil)
}

// memOpener starts the plugin at path as successive local ranks of a
// host and returns their device memory, as the contract drives it.
func memOpener(path string) func(t *testing.T) memcontract.Mem {
	next := 0
	return func(t *testing.T) memcontract.Mem {
		c, err := plugins.Open(plugins.Options{Path: path, Rank: next, Size: 2, LocalRank: next})
		next++
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		m, err := c.Memory()
		if err != nil {
			t.Fatal(err)
		}
		return memAdapter{m}
	}
}

// memAdapter is plugins.Memory without contexts: each call has a minute.
type memAdapter struct{ m *plugins.Memory }

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

func (a memAdapter) Alloc(n int) (uint64, error) {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Alloc(ctx, n)
}

func (a memAdapter) Free(p uint64) error {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Free(ctx, p)
}

func (a memAdapter) Write(p uint64, off int, src []byte) error {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Write(ctx, p, off, src)
}

func (a memAdapter) Read(dst []byte, p uint64, off int) error {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Read(ctx, dst, p, off)
}

func (a memAdapter) Export(p uint64) ([]byte, error) {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Export(ctx, p)
}

func (a memAdapter) Import(h []byte) (uint64, error) {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Import(ctx, h)
}

func (a memAdapter) Copy(dst uint64, dstOff int, src uint64, srcOff int, n int) error {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Copy(ctx, dst, dstOff, src, srcOff, n)
}

func (a memAdapter) Reduce(op, dtype string, dst uint64, dstOff int, src uint64, srcOff int, count int) error {
	ctx, cancel := callCtx()
	defer cancel()
	return a.m.Reduce(ctx, op, dtype, dst, dstOff, src, srcOff, count)
}

// Result is one line of the probe.
type Result struct {
	// What is "latency" (one-way, half a round trip) or "bandwidth".
	What string
	// Size is the message size in bytes.
	Size int
	// Micros is the one-way latency in microseconds (latency), or the
	// time per message (bandwidth).
	Micros float64
	// GBps is the bandwidth in GB/s (bandwidth only).
	GBps float64
	// Path is "plugin" (the plugin moved the data) or "handed off" (the
	// plugin handed its sockets to the rank: gorun's TCP moved it).
	Path string
}

// Probe measures the plugin between two of its processes on this host:
// ping-pong latency at 8 B and 4 KiB, and streaming bandwidth at 1 MiB and
// 16 MiB (4 messages in flight), from shared memory as the collectives send;
// through the plugin, and again with its sockets handed to the rank when
// it can hand them off.
func Probe(ctx context.Context, path, iface string) ([]Result, error) {
	if iface == "" {
		iface = DefaultIface
	}
	out, handsOff, err := probe(ctx, path, iface, true)
	if err != nil || !handsOff {
		return out, err
	}
	own, _, err := probe(ctx, path, iface, false)
	return append(own, out...), err
}

// probe runs the probe through the plugin (handoff false) or, when the
// plugin can, with its connections handed off; it reports whether they
// were.
func probe(ctx context.Context, path, iface string, handoff bool) (out []Result, handsOff bool, err error) {
	open := func() (*plugins.Transport, error) {
		return plugins.OpenTransport(plugins.Options{Path: path, Iface: iface, Rank: -1, Size: -1, LocalRank: -1, Log: io.Discard, NoHandoff: !handoff})
	}
	defer func() {
		for i := range out {
			out[i].Path = "plugin"
			if handsOff {
				out[i].Path = "handed off"
			}
		}
	}()
	a, err := open()
	if err != nil {
		return nil, false, err
	}
	defer a.Close()
	b, err := open()
	if err != nil {
		return nil, false, err
	}
	defer b.Close()
	handsOff = a.HandsOff()
	ab, ba, err := pair(ctx, a, b)
	if err != nil {
		return nil, false, err
	}
	bsc, asc := ab.sc, ba.sc
	arc, brc := ba.rc, ab.rc
	reg, err := transport.Alloc(2 * (16 << 20))
	if err != nil {
		return nil, false, err
	}
	defer reg.Close()
	for _, size := range []int{8, 4096} {
		src, dst := reg.Bytes()[:size], reg.Bytes()[16<<20:16<<20+size]
		iters := 2000
		var took time.Duration
		for round := range 2 { // the first warms up
			start := time.Now()
			for range iters {
				// a -> b -> a
				r1, err := brc.Irecv(dst, 1, nil)
				if err != nil {
					return nil, false, err
				}
				if err := sendWait(ctx, bsc, src); err != nil {
					return nil, false, err
				}
				if _, err := r1.Wait(ctx); err != nil {
					return nil, false, err
				}
				r2, err := arc.Irecv(src, 1, nil)
				if err != nil {
					return nil, false, err
				}
				if err := sendWait(ctx, asc, dst); err != nil {
					return nil, false, err
				}
				if _, err := r2.Wait(ctx); err != nil {
					return nil, false, err
				}
			}
			if round == 1 {
				took = time.Since(start)
			}
		}
		out = append(out, Result{What: "latency", Size: size, Micros: float64(took.Microseconds()) / float64(2*iters)})
	}
	for _, size := range []int{1 << 20, 16 << 20} {
		const window = 4
		n := max(8, (256<<20)/size)
		src, dst := reg.Bytes()[:size], reg.Bytes()[16<<20:16<<20+size]
		var took time.Duration
		for round := range 2 {
			start := time.Now()
			var sends, recvs []transport.Request
			for i := range n {
				r, err := brc.Irecv(dst, 2, nil)
				if err != nil {
					return nil, false, err
				}
				s, err := bsc.Isend(src, 2, nil)
				if err != nil {
					return nil, false, err
				}
				sends, recvs = append(sends, s), append(recvs, r)
				if i >= window-1 {
					if err := transport.WaitAll(ctx, sends[0], recvs[0]); err != nil {
						return nil, false, err
					}
					sends, recvs = sends[1:], recvs[1:]
				}
			}
			for i := range sends {
				if err := transport.WaitAll(ctx, sends[i], recvs[i]); err != nil {
					return nil, false, err
				}
			}
			if round == 1 {
				took = time.Since(start)
			}
		}
		per := took.Seconds() / float64(n)
		out = append(out, Result{What: "bandwidth", Size: size, Micros: per * 1e6, GBps: float64(size) / per / 1e9})
	}
	return out, handsOff, nil
}

func sendWait(ctx context.Context, c transport.SendConn, b []byte) error {
	r, err := c.Isend(b, 1, nil)
	if err != nil {
		return err
	}
	_, err = r.Wait(ctx)
	return err
}

type conns struct {
	sc transport.SendConn
	rc transport.RecvConn
}

// pair connects from to to; the first result is from->to, the second
// to->from.
func pair(ctx context.Context, from, to transport.Transport) (conns, conns, error) {
	one := func(x, y transport.Transport) (conns, error) {
		l, err := y.Listen(ctx)
		if err != nil {
			return conns{}, err
		}
		defer l.Close()
		sc, err := x.Connect(ctx, l.Handle())
		if err != nil {
			return conns{}, err
		}
		rc, err := l.Accept(ctx)
		if err != nil {
			return conns{}, err
		}
		return conns{sc, rc}, nil
	}
	ab, err := one(from, to)
	if err != nil {
		return conns{}, conns{}, err
	}
	ba, err := one(to, from)
	return ab, ba, err
}

// CheckOptions say what Check does besides the suite.
type CheckOptions struct {
	Options
	// Probe runs the probe after a passed suite and prints its table.
	Probe bool
}

// Check is gorun plugins test: it starts the plugin at path outside a job,
// prints what it is and the devices it found, runs the contract suite when
// it has a transport (in a child of self) and, if asked, the probe. Its
// report goes to o.Stdout; the error says what failed. It returns what the
// plugin says of itself.
func Check(ctx context.Context, self, path string, o CheckOptions) (plugins.Info, error) {
	if o.Iface == "" {
		o.Iface = DefaultIface
	}
	info, devs, err := plugins.Inspect(ctx, path, plugins.Options{Iface: o.Iface})
	if err != nil {
		return info, err
	}
	fmt.Fprintf(o.Stdout, "plugin %s %s (%s)\n", info.Name, info.Version, path)
	for _, d := range devs {
		fmt.Fprintf(o.Stdout, "  device %s %s %s\n", d.Name, d.Provider, d.Note)
	}
	if info.Memory {
		start := time.Now()
		mo := o.Options
		mo.Memory = true
		if err := Run(ctx, self, path, mo); err != nil {
			return info, fmt.Errorf("plugin %s failed the device memory contract", path)
		}
		fmt.Fprintf(o.Stdout, "device memory contract: passed (%s)\n", time.Since(start).Round(time.Millisecond))
	}
	if !info.Transport {
		if !info.Memory {
			fmt.Fprintf(o.Stdout, "it provides no transport: nothing to test here (its collectives are tested through a job)\n")
		}
		return info, nil
	}
	start := time.Now()
	if err := Run(ctx, self, path, o.Options); err != nil {
		return info, err
	}
	fmt.Fprintf(o.Stdout, "transport contract: passed (%s)\n", time.Since(start).Round(time.Millisecond))
	if !o.Probe {
		return info, nil
	}
	res, err := Probe(ctx, path, o.Iface)
	if err != nil {
		return info, fmt.Errorf("probe: %w", err)
	}
	return info, WriteProbe(o.Stdout, res)
}

// WriteProbe prints the probe's results as a table.
func WriteProbe(out io.Writer, res []Result) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "probe (2 plugin processes on this host)\tpath\tsize\tus\tGB/s\t")
	for _, r := range res {
		gb := "-"
		if r.What == "bandwidth" {
			gb = fmt.Sprintf("%.2f", r.GBps)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%s\t\n", r.What, r.Path, sizeText(r.Size), r.Micros, gb)
	}
	return w.Flush()
}

// Preflight is gorun --plugin-check: the quick suite against the plugin at
// path, on loopback, before a job starts. It writes one line to log when
// the plugin passed, and the suite's report when it did not.
func Preflight(ctx context.Context, self, path string, log io.Writer) error {
	var out strings.Builder
	start := time.Now()
	info, err := Check(ctx, self, path, CheckOptions{Options: Options{Quick: true, Stdout: &out, Stderr: &out}})
	switch {
	case err != nil:
		fmt.Fprint(log, out.String())
		return err
	case !info.Transport:
		fmt.Fprintf(log, "gorun: --plugin-check: %s starts (it has no transport to test)\n", path)
	default:
		fmt.Fprintf(log, "gorun: --plugin-check: %s passed the quick transport contract (%s)\n", path, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// sizeText writes a probe size as the table shows it: 8 B, 4 KiB, 1 MiB.
func sizeText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
