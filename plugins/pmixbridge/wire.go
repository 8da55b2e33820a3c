package pmixbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/pluginbin"
)

// The wire: each side writes JSON values (frames), one per line. The
// plugin's first frame is its hello. The agent sends calls (an ID, a
// method and its request); the plugin answers each with a frame of the
// same ID (the reply, or an error), in any order, and sends events, which
// have no ID, whenever it has one.

// frame is one value on the wire.
type frame struct {
	ID     uint64          `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Err    string          `json:"err,omitempty"`
	Event  *Event          `json:"event,omitempty"`
	Hello  *hello          `json:"hello,omitempty"`
}

// hello is the plugin's first frame.
type hello struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// ErrByHand is Serve's error in a process that the agent did not start
// (its environment lacks the cookie).
var ErrByHand = fmt.Errorf("%s is gorun's PMIx plugin: the gorun agent starts it for the programs that need PMIx (Open MPI, mpi4py); it is not meant to be run by hand", Binary)

// FD is the plugin's descriptor of its end of the socket pair.
const FD = 3

// encoder writes frames from several goroutines.
type encoder struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *encoder) send(f *frame) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(f)
}

// Serve runs the plugin's end on descriptor FD until the agent closes its
// end. A process started without the agent's cookie was run by hand: it
// says what it is and returns an error.
func Serve(impl Server) error {
	if os.Getenv(CookieKey) != CookieValue {
		return ErrByHand
	}
	f := os.NewFile(FD, "pmix-bridge")
	if f == nil {
		return fmt.Errorf("no descriptor %d from the agent", FD)
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("descriptor %d: %w", FD, err)
	}
	return ServeConn(c, impl)
}

// ServeConn serves impl on conn until the other end closes it; then it
// closes conn and returns nil (an error if the wire broke otherwise).
// Every call runs in its own goroutine, and events go out as impl's
// Events sends them.
func ServeConn(conn io.ReadWriteCloser, impl Server) error {
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	w := &encoder{enc: json.NewEncoder(conn)}
	if err := w.send(&frame{Hello: &hello{Name: Binary, Version: ProtocolVersion}}); err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		impl.Events(ctx, func(e *Event) error { return w.send(&frame{Event: e}) })
	}()
	dec := json.NewDecoder(conn)
	for {
		f := new(frame)
		if err := dec.Decode(f); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("reading the agent's calls: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.send(dispatch(ctx, impl, f))
		}()
	}
}

// dispatch runs one call and returns its answer.
func dispatch(ctx context.Context, impl Server, f *frame) *frame {
	var out any
	var err error
	switch f.Method {
	case "Start":
		out, err = handle(ctx, f.Body, impl.Start)
	case "FenceDone":
		out, err = handle(ctx, f.Body, impl.FenceDone)
	case "Rank":
		out, err = handle(ctx, f.Body, impl.Rank)
	case "Stop":
		out, err = handle(ctx, f.Body, impl.Stop)
	case "Done":
		out, err = handle(ctx, f.Body, impl.Done)
	case "Modex":
		out, err = handle(ctx, f.Body, impl.Modex)
	default:
		err = fmt.Errorf("no method %q", f.Method)
	}
	r := &frame{ID: f.ID}
	if err == nil {
		r.Body, err = json.Marshal(out)
	}
	if err != nil {
		r.Body, r.Err = nil, err.Error()
	}
	return r
}

// handle decodes a call's request and runs it.
func handle[In, Out any](ctx context.Context, body json.RawMessage, call func(context.Context, *In) (*Out, error)) (any, error) {
	in := new(In)
	if err := json.Unmarshal(body, in); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	return call(ctx, in)
}

// Client is the agent's end of the bridge.
type Client struct {
	conn io.ReadWriteCloser
	w    *encoder
	cmd  *exec.Cmd // the plugin process, when Start started it

	mu     sync.Mutex
	next   uint64
	calls  map[uint64]chan *frame
	events []*Event      // received, not yet handed to Events
	ready  chan struct{} // a token when events has some
	helloC chan struct{} // closed at the plugin's hello
	done   chan struct{} // closed when the wire ended
	err    error         // why it ended, once done is closed
	closed sync.Once
}

// NewClient returns the agent's end of a bridge on conn, which a plugin
// serves (ServeConn).
func NewClient(conn io.ReadWriteCloser) *Client {
	c := &Client{conn: conn, w: &encoder{enc: json.NewEncoder(conn)}, calls: map[uint64]chan *frame{},
		ready: make(chan struct{}, 1), helloC: make(chan struct{}), done: make(chan struct{})}
	go c.read()
	return c
}

// Start starts the plugin binary at path, which must pass
// pluginbin.CheckBinary, with env added to its environment (this
// process's, less pluginbin.SecretEnv) and its standard output and error
// going to stderr (nil: discarded), and waits up to timeout for its hello.
// The plugin leads its own process group, and dies with the thread that
// started it.
func Start(path string, env []string, stderr io.Writer, timeout time.Duration) (*Client, error) {
	fail := func(err error) (*Client, error) { return nil, fmt.Errorf("plugin %s (%s): %w", Name, path, err) }
	if err := pluginbin.CheckBinary(path); err != nil {
		return fail(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("socketpair: %w", err))
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "pmix-bridge"), os.NewFile(uintptr(fds[1]), "pmix-bridge")
	cmd := exec.Command(path)
	cmd.Env = append(pluginbin.Environ(os.Environ()), append([]string{CookieKey + "=" + CookieValue}, env...)...)
	cmd.ExtraFiles = []*os.File{theirs} // descriptor FD
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	theirs.Close() // the plugin's now: its exit is the wire's end
	if err != nil {
		mine.Close()
		return fail(err)
	}
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return fail(err)
	}
	c := NewClient(conn)
	c.cmd = cmd
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.helloC:
		return c, nil
	case <-c.done:
		err = c.err
	case <-t.C:
		err = fmt.Errorf("no hello within %v", timeout)
	}
	c.Close()
	return fail(err)
}

// read takes the plugin's frames until the wire ends.
func (c *Client) read() {
	dec := json.NewDecoder(c.conn)
	var err error
	for greeted := false; ; {
		f := new(frame)
		if err = dec.Decode(f); err != nil {
			break
		}
		if !greeted {
			if f.Hello == nil || f.Hello.Name != Binary {
				err = errors.New("it is not gorun's PMIx plugin (no hello)")
				break
			}
			if f.Hello.Version != ProtocolVersion {
				err = fmt.Errorf("it speaks version %d of the bridge, this gorun %d: a %s from another build of gorun", f.Hello.Version, ProtocolVersion, Binary)
				break
			}
			greeted = true
			close(c.helloC)
			continue
		}
		c.mu.Lock()
		if f.Event != nil {
			c.events = append(c.events, f.Event)
			select {
			case c.ready <- struct{}{}:
			default:
			}
		} else if ch := c.calls[f.ID]; ch != nil {
			delete(c.calls, f.ID)
			ch <- f
		}
		c.mu.Unlock()
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = errors.New("the plugin closed the bridge (it exited)")
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}

// lost returns why the wire ended; call it once done is closed.
func (c *Client) lost() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Errorf("plugin %s: %w", Name, c.err)
}

// call sends method with in and decodes the answer into out.
func (c *Client) call(ctx context.Context, method string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ch := make(chan *frame, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.calls[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}
	if err := c.w.send(&frame{ID: id, Method: method, Body: body}); err != nil {
		forget()
		select {
		case <-c.done:
			return c.lost()
		default:
			return fmt.Errorf("plugin %s: %s: %w", Name, method, err)
		}
	}
	var r *frame
	select {
	case r = <-ch:
	case <-ctx.Done():
		forget()
		return ctx.Err()
	case <-c.done:
		select {
		case r = <-ch: // answered as the wire ended
		default:
			return c.lost()
		}
	}
	if r.Err != "" {
		return errors.New(r.Err)
	}
	return json.Unmarshal(r.Body, out)
}

// Start registers a generation.
func (c *Client) Start(ctx context.Context, r *StartRequest) (*StartReply, error) {
	out := new(StartReply)
	return out, c.call(ctx, "Start", r, out)
}

// FenceDone completes a fence.
func (c *Client) FenceDone(ctx context.Context, r *FenceDone) error {
	return c.call(ctx, "FenceDone", r, new(Empty))
}

// Rank asks for a rank's state.
func (c *Client) Rank(ctx context.Context, nspace string, rank int) (*RankState, error) {
	out := new(RankState)
	return out, c.call(ctx, "Rank", &RankQuery{Nspace: nspace, Rank: rank}, out)
}

// Stop forgets a generation (or a spawned job).
func (c *Client) Stop(ctx context.Context, nspace string) error {
	return c.call(ctx, "Stop", &RankQuery{Nspace: nspace}, new(Empty))
}

// Done completes a request event.
func (c *Client) Done(ctx context.Context, d *Done) error {
	return c.call(ctx, "Done", d, new(Empty))
}

// Modex asks for the data of a process that runs on the plugin's host.
func (c *Client) Modex(ctx context.Context, p Proc) ([]byte, error) {
	out := new(ModexData)
	err := c.call(ctx, "Modex", &p, out)
	return out.Data, err
}

// Events calls on for each event, in the order the plugin sent them,
// until ctx ends (it returns nil) or the wire ends (it returns why).
// Events that came before it was called are handed over first.
func (c *Client) Events(ctx context.Context, on func(*Event)) error {
	for {
		c.mu.Lock()
		es := c.events
		c.events = nil
		c.mu.Unlock()
		for _, e := range es {
			on(e)
		}
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil
		case <-c.done:
			c.mu.Lock()
			left := len(c.events)
			c.mu.Unlock()
			if left == 0 {
				return c.lost()
			}
		}
	}
}

// Close ends the bridge: it closes the wire and, when Start started the
// plugin, kills the plugin's process group and waits for it. The plugin
// has nothing to save by then: its ranks are gone.
func (c *Client) Close() error {
	c.closed.Do(func() {
		c.conn.Close()
		if c.cmd != nil {
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			c.cmd.Wait()
		}
		<-c.done
	})
	return nil
}
