package transport_test

import (
	"fmt"
	"testing"

	"github.com/gorun/gorun/transport"
)

func TestPick(t *testing.T) {
	t.Parallel()
	const (
		tcp    = transport.KindTCP
		shm    = transport.KindSHM
		plugin = transport.KindPlugin
	)
	cases := []struct {
		mode     transport.Mode
		sameHost bool
		plugin   bool
		want     transport.Kind
	}{
		{transport.ModeAuto, true, false, shm},
		{transport.ModeAuto, true, true, shm},
		{transport.ModeAuto, false, false, tcp},
		{transport.ModeAuto, false, true, plugin},
		{transport.ModeTCP, true, false, tcp},
		{transport.ModeTCP, true, true, tcp},
		{transport.ModeTCP, false, false, tcp},
		{transport.ModeTCP, false, true, tcp},
		{transport.ModeSHM, true, false, shm},
		{transport.ModeSHM, true, true, shm},
		{transport.ModeSHM, false, false, shm},
		{transport.ModeSHM, false, true, shm},
		{transport.ModePlugin, true, false, tcp},
		{transport.ModePlugin, true, true, plugin},
		{transport.ModePlugin, false, false, tcp},
		{transport.ModePlugin, false, true, plugin},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s/samehost=%t/plugin=%t", tc.mode, tc.sameHost, tc.plugin)
		t.Run(name, func(t *testing.T) {
			got := tc.mode.Pick(transport.Pair{SameHost: tc.sameHost, Plugin: tc.plugin})
			if got != tc.want {
				t.Errorf("Pick = %s, want %s", got, tc.want)
			}
		})
	}
}

// Uses says yes to every kind Pick returns for a pair the world can hold:
// on one host, only pairs on the same host.
func TestUsesCoversPick(t *testing.T) {
	t.Parallel()
	for _, mode := range []transport.Mode{transport.ModeAuto, transport.ModeTCP, transport.ModeSHM, transport.ModePlugin} {
		for _, hosts := range []int{0, 1, 2} {
			for _, p := range []transport.Pair{{true, false}, {true, true}, {false, false}, {false, true}} {
				if hosts == 1 && !p.SameHost {
					continue
				}
				if k := mode.Pick(p); !mode.Uses(k, hosts) {
					t.Errorf("%s, %d hosts, %+v: Pick = %s but Uses(%s) = false", mode, hosts, p, k, k)
				}
			}
		}
	}
}

func TestUses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode          transport.Mode
		hosts         int
		tcp, shm, plg bool
	}{
		{transport.ModeAuto, 0, true, true, true},
		{transport.ModeAuto, 1, false, true, false},
		{transport.ModeAuto, 2, true, true, true},
		{transport.ModeTCP, 1, true, false, false},
		{transport.ModeTCP, 2, true, false, false},
		{transport.ModeSHM, 1, false, true, false},
		{transport.ModeSHM, 2, false, true, false},
		{transport.ModePlugin, 1, true, false, true},
		{transport.ModePlugin, 2, true, false, true},
	}
	for _, tc := range cases {
		got := [3]bool{tc.mode.Uses(transport.KindTCP, tc.hosts), tc.mode.Uses(transport.KindSHM, tc.hosts), tc.mode.Uses(transport.KindPlugin, tc.hosts)}
		if want := [3]bool{tc.tcp, tc.shm, tc.plg}; got != want {
			t.Errorf("%s on %d hosts: Uses tcp, shm, plugin = %v, want %v", tc.mode, tc.hosts, got, want)
		}
	}
}

func TestKindModeString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    fmt.Stringer
		want string
	}{
		{transport.KindTCP, "tcp"}, {transport.KindSHM, "shm"}, {transport.KindPlugin, "plugin"}, {transport.Kind(7), "Kind(7)"},
		{transport.ModeAuto, "auto"}, {transport.ModeTCP, "tcp"}, {transport.ModeSHM, "shm"}, {transport.ModePlugin, "plugin"}, {transport.Mode(-1), "Mode(-1)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
