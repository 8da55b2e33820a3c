package main

import (
	"testing"

	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/plugins/sdk/sdktest"
)

// TestTransport runs the SDK's conformance suite against the transport,
// on the loopback interface only.
func TestTransport(t *testing.T) {
	sdktest.Run(t, func(t *testing.T) sdk.Transport {
		tr, err := newTransport(sdk.Config{Rank: -1, Size: -1, LocalRank: -1, Options: map[string]string{"addr": "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	})
}

// TestTransportHandoff runs the suite as a rank that adopts sockets
// configures the transport: two streams per connection, gathered by the
// listener, which the Handoff test hands off and moves messages over.
func TestTransportHandoff(t *testing.T) {
	sdktest.Run(t, func(t *testing.T) sdk.Transport {
		tr, err := newTransport(sdk.Config{Rank: -1, Size: -1, LocalRank: -1, Handoff: true, Options: map[string]string{"addr": "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if n := tr.(*tcpTransport).streams; n != defaultStreams {
			t.Fatalf("%d streams per connection, want %d", n, defaultStreams)
		}
		return tr
	})
}

// TestPickAddr checks the choice of the listening address.
func TestPickAddr(t *testing.T) {
	t.Setenv(envAddr, "")
	for _, tc := range []struct {
		cfg  sdk.Config
		want string
		ok   bool
	}{
		{sdk.Config{}, "127.0.0.1", true},
		{sdk.Config{Options: map[string]string{"addr": "127.0.0.2"}}, "127.0.0.2", true},
		{sdk.Config{Iface: "=lo"}, "127.0.0.1", true},
		{sdk.Config{Iface: "lo"}, "127.0.0.1", true},
		{sdk.Config{Iface: "no-such-interface"}, "", false},
		{sdk.Config{Options: map[string]string{"addr": "localhost"}}, "", false},
		{sdk.Config{Options: map[string]string{"addr": "::1"}}, "", false},
	} {
		ip, _, err := pickAddr(tc.cfg)
		if (err == nil) != tc.ok || (tc.ok && ip.String() != tc.want) {
			t.Errorf("pickAddr(%+v) = %v, %v; want %s (ok %v)", tc.cfg, ip, err, tc.want, tc.ok)
		}
	}
}

// TestParseHandle checks that only our own handles are accepted.
func TestParseHandle(t *testing.T) {
	if _, err := parseHandle(makeHandle("127.0.0.1:4711")); err != nil {
		t.Errorf("a good handle: %v", err)
	}
	for _, h := range []string{"", "tcpexample/", "tcpexample/127.0.0.1", "tcpexample/127.0.0.1:0", "tcpexample/[::1]:80", "tcpexample/host:80", "other/127.0.0.1:80", string(makeHandle("127.0.0.1:4711")[:30]), string(makeHandle("127.0.0.1:4711")) + "0"} {
		if _, err := parseHandle([]byte(h)); err == nil {
			t.Errorf("parseHandle(%q) succeeded", h)
		}
	}
}
