// Command gorun-plugin-tcpexample is a gorun transport plugin that moves
// messages over plain TCP. It is the example plugin authors copy: small,
// with nothing but what a transport needs, and written against the SDK in
// github.com/gorun/gorun/plugins/sdk, which does the rest (tags, matching,
// message lengths, memory sharing with the rank, requests).
//
// The design, in four files:
//
//   - main.go (this file): main, which hands the plugin to sdk.Serve, and
//     the choice of the address to listen on.
//   - transport.go: the sdk.Transport and its sdk.Listener: listening,
//     connecting, closing.
//   - conn.go: the connections. Each gorun connection the plugin serves
//     itself is one TCP connection carrying frames (an 8-byte length, then the message).
//     A writer goroutine per send side and a reader goroutine per receive
//     side do the blocking I/O and complete the requests; the SDK's
//     progress loop only polls them with Test, so nothing it calls blocks.
//   - handoff.go: the hello that opens each TCP connection, and the
//     hand-off (sdk.Handoff): when the rank allows it, every connection's
//     sockets go to the rank, which moves the data with gorun's own TCP
//     protocol, and the plugin leaves the data path.
//
// Build it with go build -o gorun-plugin-tcpexample . and use it with
// gorun --plugin tcpexample.
package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/gorun/gorun/plugins/sdk"
)

func main() {
	sdk.Serve(sdk.Plugin{
		Name:        "tcpexample",
		Version:     "0.1.0",
		Description: "example transport over plain TCP (it hands its sockets to the rank)",
		Transport:   newTransport,
	})
}

// envAddr names the environment variable that chooses the IPv4 address to
// listen on when gorun gave no interface.
const envAddr = "GORUN_TCPEXAMPLE_ADDR"

// newTransport makes the transport of one rank. It is what sdk.Serve calls
// once the rank started the plugin.
func newTransport(cfg sdk.Config) (sdk.Transport, error) {
	ip, iface, err := pickAddr(cfg)
	if err != nil {
		return nil, fmt.Errorf("tcpexample: %w", err)
	}
	if cfg.Logger != nil {
		cfg.Logger.Debug("listening address chosen", "addr", ip, "iface", iface)
	}
	streams, err := streamsFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("tcpexample: %w", err)
	}
	wake := cfg.Wake
	if wake == nil {
		wake = func() {}
	}
	return &tcpTransport{ip: ip, iface: iface, wake: wake, streams: streams, open: make(map[closer]bool)}, nil
}

// pickAddr chooses the IPv4 address to listen on, and the name of its
// interface:
//
//  1. the first IPv4 address of cfg.Iface (gorun --iface; a leading "="
//     only says "this exact interface", which is all we do anyway);
//  2. else the address of the plugin option "addr" (gorun --plugin-opt
//     addr=10.0.0.1) or of $GORUN_TCPEXAMPLE_ADDR;
//  3. else 127.0.0.1, so that a plugin nobody configured never listens on
//     a network it was not asked to.
//
// Addresses must be written as numbers: a transport must not depend on DNS.
func pickAddr(cfg sdk.Config) (netip.Addr, string, error) {
	if name := strings.TrimPrefix(cfg.Iface, "="); name != "" {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return netip.Addr{}, "", fmt.Errorf("interface %q: %w", name, err)
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return netip.Addr{}, "", fmt.Errorf("addresses of interface %q: %w", name, err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				return p.Addr(), name, nil
			}
		}
		return netip.Addr{}, "", fmt.Errorf("interface %q has no IPv4 address", name)
	}
	text := cfg.Options["addr"]
	if text == "" {
		text = os.Getenv(envAddr)
	}
	if text == "" {
		text = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(text)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, "", fmt.Errorf("listen address %q: want an IPv4 address like 10.0.0.1", text)
	}
	return ip, ifaceOf(ip), nil
}

// ifaceOf returns the name of the interface that holds ip, or "".
func ifaceOf(ip netip.Addr) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == ip {
				return ifi.Name
			}
		}
	}
	return ""
}

// Devices reports the one interface the transport uses.
func (t *tcpTransport) Devices(ctx context.Context) ([]sdk.Device, error) {
	name := t.iface
	if name == "" {
		name = t.ip.String()
	}
	return []sdk.Device{{
		Name:     name,
		Provider: "tcp",
		NUMA:     -1,
		Note:     "selected, address " + t.ip.String(),
	}}, nil
}
