package procfs

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
)

func TestParseDefaultRoute(t *testing.T) {
	t.Parallel()
	const head = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	tests := []struct {
		name, file, want string
	}{
		{"default via eth0", head + "eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
			"eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", "eth0"},
		{"subnet routes only", head + "veth1\t0000D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", ""},
		{"a default route that is down", head + "eth1\t00000000\t0101A8C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		if got := ParseDefaultRoute([]byte(tt.file)); got != tt.want {
			t.Errorf("%s: ParseDefaultRoute = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParseStatusKB(t *testing.T) {
	t.Parallel()
	status := "Name:\tgorun\nVmPeak:\t  812344 kB\nVmHWM:\t   21876 kB\nVmRSS:\t   20100 kB\n"
	if got := ParseStatusKB([]byte(status), "VmHWM"); got != 21876 {
		t.Errorf("VmHWM = %d", got)
	}
	if got := ParseStatusKB([]byte(status), "VmSwap"); got != 0 {
		t.Errorf("VmSwap = %d", got)
	}
	if got := Proc.SelfStatusKB("VmHWM"); got <= 0 {
		t.Errorf("this process's VmHWM = %d", got)
	}
}

// littleEndian reports whether this machine stores words as the
// fixtures under testdata/sockets were captured (amd64).
func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

func TestParseNetTCP(t *testing.T) {
	t.Parallel()
	if !littleEndian() {
		t.Skip("the fixtures hold a little-endian machine's addresses")
	}
	sock := func(local, remote string, state, uid int, inode uint64) Socket {
		return Socket{Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote), State: state, UID: uid, Inode: inode}
	}
	tests := []struct {
		name string
		file string // under testdata
		text string // when file is ""
		want []Socket
		err  bool
	}{
		{name: "IPv4: listeners, a connection both ways, TIME_WAIT", file: "sockets/net/tcp", want: []Socket{
			sock("127.0.0.1:29441", "0.0.0.0:0", TCPListen, 0, 31778),
			sock("127.0.0.1:29445", "0.0.0.0:0", TCPListen, 0, 31786),
			sock("127.0.0.1:29441", "127.0.0.1:42660", 1, 0, 0), // not accepted yet: no process holds it
			sock("127.0.0.1:42660", "127.0.0.1:29441", 1, 0, 31788),
			sock("127.0.0.1:33158", "127.0.0.1:35979", 6, 0, 0),
		}},
		{name: "IPv6: wildcards and ::1, another user's", file: "sockets/net/tcp6", want: []Socket{
			sock("[::]:29443", "[::]:0", TCPListen, 0, 31782),
			sock("[::]:29442", "[::]:0", TCPListen, 1002, 31780),
			sock("[::1]:29444", "[::]:0", TCPListen, 0, 31784),
		}},
		{name: "heading only", text: "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"},
		{name: "empty", text: ""},
		{name: "short line", text: "head\n   0: 0100007F:7301 00000000:0000 0A\n", err: true},
		{name: "address not hexadecimal", text: "head\n   0: 0100007G:7301 00000000:0000 0A 0:0 0:0 0 0 0 1\n", err: true},
		{name: "address of 3 bytes", text: "head\n   0: 00007F:7301 00000000:0000 0A 0:0 0:0 0 0 0 1\n", err: true},
		{name: "no port", text: "head\n   0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 1\n", err: true},
		{name: "uid not a number", text: "head\n   0: 0100007F:7301 00000000:0000 0A 0:0 0:0 0 x 0 1\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := input(t, tt.file, tt.text)
			got, err := ParseNetTCP(b)
			if tt.err {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("ParseNetTCP = %+v, %v; want an ErrFormat", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseNetTCP = %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

func TestTCPSockets(t *testing.T) {
	t.Parallel()
	if !littleEndian() {
		t.Skip("the fixtures hold a little-endian machine's addresses")
	}
	for _, tt := range []struct {
		fs   FS
		want int
	}{{"testdata/sockets", 8}, {"testdata/sockets-v4only", 5}} {
		if got, err := tt.fs.TCPSockets(); err != nil || len(got) != tt.want {
			t.Errorf("%s: %d sockets, %v; want %d", tt.fs, len(got), err, tt.want)
		}
	}
	if got, err := FS("testdata/none").TCPSockets(); err == nil {
		t.Errorf("no file system: %d sockets and no error", len(got))
	}
	// This machine's: a listener of this process's is among them, with
	// this process's uid.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := netip.MustParseAddrPort(ln.Addr().String())
	socks, err := Proc.TCPSockets()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(socks, func(s Socket) bool {
		return s.Local == addr && s.State == TCPListen && s.UID == os.Geteuid() && s.Inode != 0
	}) {
		t.Errorf("this process's listener %s is not among /proc/net/tcp's sockets: %+v", addr, socks)
	}
}
