package tcp

import (
	"net"
	"strings"
	"testing"
)

func TestPickAddr(t *testing.T) {
	ifs := []netIface{
		{name: "lo", up: true, loopback: true, addrs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}},
		{name: "docker0", up: true, addrs: []net.IP{net.ParseIP("172.17.0.1")}},
		{name: "eth0", up: true, addrs: []net.IP{net.ParseIP("fe80::1"), net.ParseIP("10.0.0.5")}},
		{name: "eth1", up: false, addrs: []net.IP{net.ParseIP("10.1.0.5")}},
		{name: "ib0", up: true, addrs: []net.IP{net.ParseIP("fe80::2"), net.ParseIP("2001:db8::7")}},
		{name: "ens5", up: true},
	}
	for _, tc := range []struct {
		name, spec, wantIf, wantIP, wantErr string
		ifs                                 []netIface
	}{
		{name: "default skips lo and docker", spec: "", wantIf: "eth0", wantIP: "10.0.0.5"},
		{name: "prefix", spec: "ib", wantIf: "ib0", wantIP: "2001:db8::7"},
		{name: "list prefers IPv4", spec: "ib,eth", wantIf: "eth0", wantIP: "10.0.0.5"},
		{name: "exact", spec: "=lo", wantIf: "lo", wantIP: "127.0.0.1"},
		{name: "exact needs the whole name", spec: "=eth", wantErr: `no interface matching "=eth"`},
		{name: "down interfaces are skipped", spec: "=eth1", wantErr: "eth0"},
		{name: "exclude", spec: "^eth,lo", wantIf: "docker0", wantIP: "172.17.0.1"},
		{name: "no address", spec: "ens", wantErr: "no interface"},
		{name: "empty list", spec: ",", wantErr: "names no interface"},
		{name: "default falls back to loopback", spec: "", ifs: ifs[:2:2][:1], wantIf: "lo", wantIP: "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := ifs
			if tc.ifs != nil {
				list = tc.ifs
			}
			name, ip, err := pickAddr(tc.spec, list)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("pickAddr(%q) = %s %v, %v; want an error containing %q", tc.spec, name, ip, err, tc.wantErr)
				}
				return
			}
			if err != nil || name != tc.wantIf || !ip.Equal(net.ParseIP(tc.wantIP)) {
				t.Fatalf("pickAddr(%q) = %s %v, %v; want %s %s", tc.spec, name, ip, err, tc.wantIf, tc.wantIP)
			}
		})
	}
}

func TestNewIface(t *testing.T) {
	tr, err := New(Options{Iface: "=lo"})
	if err != nil {
		t.Fatal(err)
	}
	if name, ip := tr.Interface(); name != "lo" || !ip.IsLoopback() {
		t.Errorf("Interface() = %s %v, want lo and a loopback address", name, ip)
	}
	if _, err := New(Options{Iface: "=no-such-interface"}); err == nil {
		t.Error("New with an interface that does not exist succeeded")
	}
	if _, err := New(Options{Iface: "lo", Streams: MaxStreams + 1}); err == nil {
		t.Error("New with too many streams succeeded")
	}
}
