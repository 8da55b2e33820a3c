package tcp_test

import (
	"testing"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/tcp"
	"github.com/gorun/gorun/transport/transporttest"
)

func newLoopback(t *testing.T, opts tcp.Options) transport.Transport {
	opts.Iface = "lo"
	tr, err := tcp.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestContract(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return newLoopback(t, tcp.Options{}) })
}

func TestContractOneStream(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return newLoopback(t, tcp.Options{Streams: 1}) })
}

// The contract holds with the first stream's reader blocking at once, as
// well as spinning (the default).
func TestContractNoSpin(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return newLoopback(t, tcp.Options{Spin: -1}) })
}
