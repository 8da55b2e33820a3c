package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/internal/testenv"
)

var pluginBins struct {
	once sync.Once
	dir  string
	err  error
}

// pluginBin builds the example plugin in examples/plugins/<name> once per
// test binary and returns its path.
func pluginBin(t *testing.T, name string) string {
	t.Helper()
	pluginBins.once.Do(func() {
		pluginBins.dir, pluginBins.err = os.MkdirTemp("", "coll-plugins")
		for _, n := range []string{"tcpexample", "collexample"} {
			if pluginBins.err != nil {
				return
			}
			out, err := exec.Command("go", "build", "-o", filepath.Join(pluginBins.dir, "gorun-plugin-"+n), "github.com/gorun/gorun/examples/plugins/"+n).CombinedOutput()
			if err != nil {
				pluginBins.err = fmt.Errorf("building %s: %v\n%s", n, err, out)
			}
		}
	})
	if pluginBins.err != nil {
		t.Fatal(pluginBins.err)
	}
	return filepath.Join(pluginBins.dir, "gorun-plugin-"+name)
}

// pluginWorld is worldWith with a one-minute timeout.
func pluginWorld(t *testing.T, n int, s collectives.Setup, hosts []int, f func(c *collectives.Communicator) error) []error {
	t.Helper()
	return worldWith(t, n, s, hosts, &collectives.Options{Timeout: time.Minute}, f)
}

// A transport plugin carries the collectives between hosts (shared memory
// stays inside one), or between every pair when forced.
func TestInitPluginTransport(t *testing.T) {
	testenv.SkipShort(t, "every collective over a transport plugin, at four lengths")
	bin := pluginBin(t, "tcpexample")
	for _, tc := range []struct {
		name      string
		transport string
		hosts     []int
		want      string
		noHandoff bool // the plugin moves the data (else gorun's TCP on its sockets)
	}{
		{"hosts", "auto", []int{0, 0, 1, 2}, "shm+tcpexample", false},
		{"forced", "plugin", nil, "tcpexample", false},
		{"forced, no hand-off", "plugin", nil, "tcpexample", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := pluginWorld(t, 4, collectives.Setup{Transport: tc.transport, Plugin: bin, NoHandoff: tc.noHandoff}, tc.hosts, func(c *collectives.Communicator) error {
				if got := c.Transports(); got != tc.want && !(got == "tcpexample" && c.Rank() >= 2) {
					return fmt.Errorf("transports %q, want %q", got, tc.want)
				}
				ctx := context.Background()
				for coll := range collectives.CollBarrier + 1 {
					for _, length := range []int{0, 37, 5000, 300000} {
						if err := exerciseAll(ctx, c, coll, length, someTypes); err != nil {
							return fmt.Errorf("%s, %d elements: %w", coll, length, err)
						}
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Ranks that disagree on the hand-off (GORUN_PLUGIN_HANDOFF) fail Init
// with an error that names both and the variable, rather than connect
// sockets whose ends speak different protocols.
func TestInitHandoffMismatch(t *testing.T) {
	bin := pluginBin(t, "tcpexample")
	errs := initEach(2, time.Minute, func(r int) collectives.Setup {
		return collectives.Setup{Iface: "=lo", LocalRank: -1, Transport: "plugin", Plugin: bin, NoHandoff: r == 1}
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 0 hands its tcpexample connections off") || !strings.Contains(err.Error(), "rank 1 does not") || !strings.Contains(err.Error(), collectives.EnvHandoff) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A plugin that cannot start fails Init with an error that names it, or,
// with the TCP fallback, the job goes on over TCP.
func TestInitPluginFallback(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gorun-plugin-nothere")
	errs := pluginWorld(t, 2, collectives.Setup{Transport: "plugin", Plugin: missing}, nil, func(c *collectives.Communicator) error { return nil })
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "gorun-plugin-nothere") || !strings.Contains(err.Error(), "--transport-fallback tcp") {
			t.Errorf("rank %d without fallback: %v", r, err)
		}
	}
	errs = pluginWorld(t, 3, collectives.Setup{Plugin: missing, Fallback: "tcp"}, []int{0, 1, 2}, func(c *collectives.Communicator) error {
		if got := c.Transports(); got != "tcp" {
			return fmt.Errorf("transports %q, want tcp", got)
		}
		return exerciseAll(context.Background(), c, collectives.CollAllReduce, 1000, someTypes)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// The communicator hands a collective plugin the operations it accepts
// (collexample: allreduce sum of float32/float64) and runs the others
// itself; results are right either way.
func TestCollectivePlugin(t *testing.T) {
	bin := pluginBin(t, "collexample")
	errs := pluginWorld(t, 3, collectives.Setup{Plugin: bin}, nil, func(c *collectives.Communicator) error {
		ctx := context.Background()
		for _, n := range []int{1, 1000, 1 << 18} {
			x := make([]float64, n)
			for i := range x {
				x[i] = float64(c.Rank()*n + i)
			}
			before := c.Offloaded()
			if err := collectives.AllReduce(ctx, c, x, collectives.Sum); err != nil {
				return err
			}
			if c.Offloaded() != before+1 {
				return fmt.Errorf("a float64 sum of %d was not offloaded (%d -> %d)", n, before, c.Offloaded())
			}
			for i, v := range x {
				if want := float64(3*i + 3*n); v != want {
					return fmt.Errorf("element %d of %d: %v, want %v", i, n, v, want)
				}
			}
			y := make([]int32, n)
			for i := range y {
				y[i] = int32(c.Rank() + 1)
			}
			before = c.Offloaded()
			if err := collectives.AllReduce(ctx, c, y, collectives.Prod); err != nil {
				return err
			}
			if c.Offloaded() != before {
				return errors.New("an int32 product was offloaded, which collexample declines")
			}
			for i, v := range y {
				if v != 6 {
					return fmt.Errorf("product element %d: %d", i, v)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// GORUN_PLUGIN_HANDOFF reaches Setup: unset or 1 hands off, 0 does not,
// anything else is an error that names the variable. GORUN_COLL_DEVICE
// reaches Setup.Device.
func TestSetupFromEnvHandoff(t *testing.T) {
	t.Setenv("GORUN_RANK", "0")
	t.Setenv("GORUN_WORLD_SIZE", "1")
	for _, tc := range []struct {
		value     string
		noHandoff bool
		ok        bool
	}{{"", false, true}, {"1", false, true}, {"0", true, true}, {"off", false, false}} {
		t.Setenv(collectives.EnvHandoff, tc.value)
		t.Setenv(collectives.EnvDevice, "cuda")
		s, err := collectives.SetupFromEnv()
		if err == nil && s.Device != "cuda" {
			t.Errorf("%s=cuda: Setup.Device %q", collectives.EnvDevice, s.Device)
		}
		if (err == nil) != tc.ok || s.NoHandoff != tc.noHandoff || (err != nil && !strings.Contains(err.Error(), collectives.EnvHandoff)) {
			t.Errorf("%s=%q: NoHandoff %v, %v", collectives.EnvHandoff, tc.value, s.NoHandoff, err)
		}
	}
}
