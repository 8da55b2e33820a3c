package tcp

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/gorun/gorun/transport"
)

func TestHandleRoundTrip(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "10.1.2.3", "2001:db8::1"} {
		h := handle{ip: net.ParseIP(ip), port: 4567, nonce: [16]byte{1, 2, 3, 15: 9}}
		b := h.marshal()
		if len(b) > transport.MaxHandleSize {
			t.Fatalf("handle of %d bytes", len(b))
		}
		got, err := parseHandle(b)
		if err != nil || !got.ip.Equal(h.ip) || got.port != h.port || got.nonce != h.nonce {
			t.Fatalf("parseHandle(marshal(%v)) = %+v, %v", h, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {'t'}, {'t', 2, 4}, {'s', 1}, handle{ip: net.IPv4zero, port: 1}.marshal(), handle{ip: net.ParseIP("10.0.0.1")}.marshal()} {
		if _, err := parseHandle(bad); !errors.Is(err, transport.ErrBadHandle) {
			t.Errorf("parseHandle(% x) = %v, want ErrBadHandle", bad, err)
		}
	}
}

func FuzzParseHandle(f *testing.F) {
	f.Add([]byte(handle{ip: net.ParseIP("127.0.0.1"), port: 80}.marshal()))
	f.Add([]byte(handle{ip: net.ParseIP("::1"), port: 80}.marshal()))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHandle(b)
		if err != nil {
			if !errors.Is(err, transport.ErrBadHandle) {
				t.Fatalf("error %v does not wrap ErrBadHandle", err)
			}
			return
		}
		// An IPv4 address may come as 16 bytes (v4-mapped) and go as 4.
		again, err := parseHandle(h.marshal())
		if err != nil || !again.ip.Equal(h.ip) || again.port != h.port || again.nonce != h.nonce {
			t.Fatalf("parse(marshal(parse(% x))) = %+v, %v; want %+v", b, again, err, h)
		}
	})
}

func FuzzParseHello(f *testing.F) {
	f.Add(hello{count: 4, index: 3}.marshal())
	f.Add(make([]byte, helloSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			return
		}
		if h.index >= h.count || h.count > MaxStreams || !bytes.Equal(h.marshal()[:30], b[:30]) {
			t.Fatalf("parseHello(% x) = %+v", b, h)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	var b [frameSize]byte
	frame{fEager, 1, 2, 3}.put(&b)
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		var b [frameSize]byte
		copy(b[:], in)
		fr, err := decodeFrame(&b)
		if err != nil {
			return
		}
		var again [frameSize]byte
		fr.put(&again)
		if again != b {
			t.Fatalf("decode/put of % x gives % x", b, again)
		}
	})
}
