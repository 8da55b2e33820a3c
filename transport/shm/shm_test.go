//go:build linux

package shm_test

import (
	"testing"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/transporttest"
)

func newShm(t *testing.T, opts shm.Options) transport.Transport {
	tr, err := shm.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestContract(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return newShm(t, shm.Options{}) })
}

// TestContractNoSpin runs the contract with Waits that never spin: every
// wake-up goes through the doorbells.
func TestContractNoSpin(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return newShm(t, shm.Options{Spin: -1}) })
}

// TestContractSmallRing runs the contract with the smallest ring, so that
// rings fill and wrap all the time.
func TestContractSmallRing(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		return newShm(t, shm.Options{RingSize: 64 << 10, EagerLimit: 4 << 10})
	})
}
