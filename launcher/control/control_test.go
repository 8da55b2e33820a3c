package control

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WritePreamble("abc/def"); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 123456789)
	big := bytes.Repeat([]byte{0, 1, 2, 255}, MaxFrame/4+10) // forces a split
	if err := w.Send(TypeLaunch, Launch{JobID: "j", Argv: []string{"a", "b c"}, Ranks: []RankSpec{{Rank: 3}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.SendOutput(Output{Rank: 7, Stream: 2, Time: now, Data: big}); err != nil {
		t.Fatal(err)
	}
	if err := w.SendStdin(Stdin{Rank: 0}); err != nil {
		t.Fatal(err)
	}
	if err := w.Send(TypeShutdown, nil); err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(append([]byte("motd: hello\n"), buf.Bytes()...)))
	garbage, id, err := r.SkipPreamble()
	if err != nil || string(garbage) != "motd: hello\n" || id != "abc/def" {
		t.Fatalf("SkipPreamble = %q, %q, %v", garbage, id, err)
	}
	f, err := r.Next()
	if err != nil || f.Type != TypeLaunch {
		t.Fatalf("Next = %v, %v", f.Type, err)
	}
	var l Launch
	if err := f.Decode(&l); err != nil || l.Argv[1] != "b c" || l.Ranks[0].Rank != 3 {
		t.Fatalf("Decode = %+v, %v", l, err)
	}
	var got []byte
	for len(got) < len(big) {
		f, err := r.Next()
		if err != nil || f.Type != TypeOutput {
			t.Fatalf("Next = %v, %v", f.Type, err)
		}
		o, err := f.Output()
		if err != nil || o.Rank != 7 || o.Stream != 2 || !o.Time.Equal(now) {
			t.Fatalf("Output = %+v, %v", o, err)
		}
		got = append(got, o.Data...)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("output data changed in transit")
	}
	f, err = r.Next()
	if s, err2 := f.Stdin(); err != nil || err2 != nil || s.Rank != 0 || len(s.Data) != 0 {
		t.Fatalf("stdin EOF frame = %+v, %v, %v", s, err, err2)
	}
	if f, err := r.Next(); err != nil || f.Type != TypeShutdown || len(f.Payload) != 0 {
		t.Fatalf("shutdown = %v %v", f, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after last frame: %v, want EOF", err)
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []byte
		want string // in the error
	}{
		{"zero length", []byte{0, 0, 0, 0}, "out of range"},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 1}, "out of range"},
		// Attack 3a of the security review: refused for its length, before
		// any of the promised payload is read.
		{"1 GiB length", []byte{0x40, 0, 0, 0, byte(TypeExited), '{'}, "frame length 1073741824 out of range"},
		{"one byte over", binary.BigEndian.AppendUint32(nil, MaxFrame+1), "out of range"},
		{"unknown type", []byte{0, 0, 0, 1, 99}, "unknown frame type 99"},
		{"truncated payload", []byte{0, 0, 0, 10, 1, '{'}, "stream ended inside a hello frame"},
		{"truncated header", []byte{0, 0}, "stream ended inside a frame header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewReader(bytes.NewReader(tt.in)).Next()
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Next(%v) = %v, want ErrProtocol saying %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestHandshakeVersion(t *testing.T) {
	t.Parallel()
	var peer bytes.Buffer
	NewWriter(&peer).Send(TypeHello, Hello{Proto: Version + 1, Version: "9.9"})
	_, err := Handshake(NewWriter(io.Discard), NewReader(&peer), Hello{})
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("Handshake with a newer peer = %v, want ErrProtocol", err)
	}
	peer.Reset()
	NewWriter(&peer).Send(TypeDone, Done{})
	if _, err := Handshake(NewWriter(io.Discard), NewReader(&peer), Hello{}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Handshake with no hello = %v, want ErrProtocol", err)
	}
}

func TestNoPreamble(t *testing.T) {
	t.Parallel()
	_, _, err := NewReader(bytes.NewReader(bytes.Repeat([]byte("x"), maxGarbage+100))).SkipPreamble()
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("SkipPreamble = %v, want ErrProtocol", err)
	}
}

// endless yields bytes of b and counts them: a line that never ends, as
// far as a bounded reader can tell. (It fails after 16 MiB, so that a
// reader that is not bounded fails instead of eating the machine.)
type endless struct {
	b    byte
	read int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= 16<<20 {
		return 0, errors.New("endless: read 16 MiB")
	}
	for i := range p {
		p[i] = e.b
	}
	e.read += len(p)
	return len(p), nil
}

// A preamble line that never ends is refused after MaxPreambleLine bytes,
// having read no more than one buffer of the stream (64 KiB).
func TestPreambleLineBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rest []byte // after the preamble
		id   string
		want string // in the error; "" = no error
	}{
		{"build id", []byte(" abc/def\n"), "abc/def", ""},
		{"longest line", append(bytes.Repeat([]byte("i"), MaxPreambleLine-1), '\n'), strings.Repeat("i", MaxPreambleLine-1), ""},
		{"one byte over", append(bytes.Repeat([]byte("i"), MaxPreambleLine), '\n'), "", "longer than 256 bytes"},
		{"cut short", []byte(" abc"), "", "cut short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := append([]byte("motd\n"+Preamble), tt.rest...)
			garbage, id, err := NewReader(bytes.NewReader(in)).SkipPreamble()
			if string(garbage) != "motd\n" || id != tt.id {
				t.Errorf("SkipPreamble = %q, %q", garbage, id)
			}
			if tt.want == "" && err != nil || tt.want != "" && (!errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("SkipPreamble error = %v, want %q", err, tt.want)
			}
		})
	}
	src := &endless{b: 'x'}
	_, _, err := NewReader(io.MultiReader(strings.NewReader(Preamble), src)).SkipPreamble()
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("SkipPreamble of an endless line = %v, want it refused as too long", err)
	}
	if src.read > 64<<10 {
		t.Fatalf("SkipPreamble read %d bytes of an endless line; want at most one buffer (64 KiB)", src.read)
	}
}

// A frame whose length field promises more than arrives allocates about
// what arrived, not what was promised.
func TestFrameBufferGrowsWithData(t *testing.T) {
	// Not parallel: it measures the allocations of the whole process.
	tests := []struct {
		name string
		body int // bytes of payload that arrive after the header
	}{
		{"no body", 0},
		{"a little", 1000},
		{"a megabyte", 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := binary.BigEndian.AppendUint32(nil, MaxFrame)
			in = append(in, byte(TypeOutput))
			in = append(in, make([]byte, tt.body)...)
			src := bytes.NewReader(in)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := NewReader(src).Next()
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Next = %v, want ErrProtocol (a frame cut short)", err)
			}
			// The bufio.Reader's 64 KiB, buffers growing eightfold up to
			// eight times the payload (about nine times it in all), and
			// room for what the race detector allocates: far below the 16
			// MiB promised.
			limit := uint64(64<<10 + 10*max(tt.body, growStep) + 1<<20)
			if got := after.TotalAlloc - before.TotalAlloc; got > limit {
				t.Fatalf("a %d-byte frame header with %d bytes of payload allocated %d bytes; want at most %d", MaxFrame, tt.body, got, limit)
			}
		})
	}
	// A whole frame larger than the buffer still arrives intact, and a
	// later smaller one reuses the buffer.
	var buf bytes.Buffer
	w := NewWriter(&buf)
	big := bytes.Repeat([]byte("0123456789"), 300_000)
	w.SendOutput(Output{Rank: 1, Stream: 1, Data: big})
	w.SendOutput(Output{Rank: 2, Stream: 2, Data: []byte("small")})
	r := NewReader(&buf)
	for _, want := range [][]byte{big, []byte("small")} {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		o, err := f.Output()
		if err != nil || !bytes.Equal(o.Data, want) {
			t.Fatalf("output of %d bytes came back as %d bytes, %v", len(want), len(o.Data), err)
		}
	}
}

// Attack 3a of the security review, bad UTF-8: the text fields of a frame
// (an agent's error, a rank's stderr tail) that are not UTF-8 decode with
// U+FFFD in place of each bad byte, so that what the head prints and
// writes to --summary-json is valid UTF-8; output frames, which carry the
// ranks' bytes, pass them through untouched.
func TestBadUTF8(t *testing.T) {
	t.Parallel()
	bad := "x\xff\xfey\xc0"
	frame := func(typ Type, payload []byte) Frame {
		t.Helper()
		in := append(binary.BigEndian.AppendUint32(nil, uint32(1+len(payload))), byte(typ))
		f, err := NewReader(bytes.NewReader(append(in, payload...))).Next()
		if err != nil {
			t.Fatalf("%s frame: %v", typ, err)
		}
		return f
	}
	var x Exited
	if err := frame(TypeExited, []byte(`{"rank":1,"err":"`+bad+`","stderr_tail":"`+bad+`"}`)).Decode(&x); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	var e Error
	if err := frame(TypeError, []byte(`{"msg":"`+bad+`"}`)).Decode(&e); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	for _, s := range []string{x.Err, x.StderrTail, e.Msg} {
		if s != "x\uFFFD\uFFFDy\uFFFD" {
			t.Errorf("decoded %q, want %q", s, "x\uFFFD\uFFFDy\uFFFD")
		}
	}
	var buf bytes.Buffer
	if err := NewWriter(&buf).Send(TypeExited, Exited{Err: bad}); err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(buf.Bytes()[5:]) {
		t.Errorf("an Exited frame carries bad UTF-8: %q", buf.Bytes()[5:])
	}
	o, err := frame(TypeOutput, append(make([]byte, 13), bad...)).Output()
	if err != nil || string(o.Data) != bad {
		t.Errorf("output data %q, %v; want the bytes %q unchanged", o.Data, err, bad)
	}
}

// FuzzReader feeds arbitrary bytes to the frame reader: it must return
// frames of known types within MaxFrame or an error, never panic, and
// every frame it accepts must survive a re-encode unchanged.
func FuzzReader(f *testing.F) {
	var seed bytes.Buffer
	w := NewWriter(&seed)
	w.Send(TypeHello, Hello{Proto: 1})
	w.SendOutput(Output{Rank: 1, Stream: 1, Data: []byte("hi\n")})
	w.SendStdin(Stdin{Rank: 0, Data: []byte("x")})
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 1, 10})
	f.Add([]byte{0, 0, 0, 5, 5, 0, 0})
	// The attacks of the security review (3a): a 1 GiB length, a frame
	// cut short, an unknown type, bad UTF-8 in a JSON frame.
	f.Add([]byte{0x40, 0, 0, 0, byte(TypeExited), '{'})
	f.Add([]byte{0, 0, 0, 10, byte(TypeLaunch), '{'})
	f.Add([]byte{0, 0, 0, 1, 99})
	f.Add(append([]byte{0, 0, 0, 12, byte(TypeError)}, "{\"msg\":\"\xff\"}"...))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		for i := 0; i < 100; i++ {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if fr.Type == 0 || fr.Type > maxType || len(fr.Payload)+1 > MaxFrame {
				t.Fatalf("accepted bad frame %v (%d bytes)", fr.Type, len(fr.Payload))
			}
			switch fr.Type {
			case TypeOutput:
				o, err := fr.Output()
				if err != nil {
					continue
				}
				var b bytes.Buffer
				NewWriter(&b).SendOutput(o)
				g, err := NewReader(&b).Next()
				if err != nil || !bytes.Equal(g.Payload, fr.Payload) {
					t.Fatalf("output frame does not re-encode: %v", err)
				}
			case TypeStdin:
				fr.Stdin()
			default:
				var v map[string]any
				fr.Decode(&v)
			}
		}
	})
}
