package main

import (
	"testing"

	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/plugins/sdk/sdktest"
)

// conformance runs the SDK's conformance suite on provider prov. The
// suite re-executes the test binary for its two-process tests, so each
// provider gets its own top-level Test function.
func conformance(t *testing.T, prov string) {
	need(t, prov)
	sdktest.Run(t, func(t *testing.T) sdk.Transport {
		tr, err := newTransport(config(prov))
		if err != nil {
			t.Fatalf("newTransport(%q): %v", prov, err)
		}
		return tr
	})
}

func TestConformanceTCP(t *testing.T) { conformance(t, "tcp;ofi_rxm") }

func TestConformanceSHM(t *testing.T) { conformance(t, "shm") }
