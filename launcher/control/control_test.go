package control

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
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
	}{
		{"zero length", []byte{0, 0, 0, 0}},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 1}},
		{"unknown type", []byte{0, 0, 0, 1, 99}},
		{"truncated payload", []byte{0, 0, 0, 10, 1, '{'}},
		{"truncated header", []byte{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewReader(bytes.NewReader(tt.in)).Next()
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Next(%v) = %v, want ErrProtocol", tt.in, err)
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
