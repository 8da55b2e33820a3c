package procfs

import "testing"

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
