package main

import (
	"testing"

	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/plugins/sdk/sdktest"
)

// TestTransport runs the SDK's conformance suite against the transport.
func TestTransport(t *testing.T) {
	sdktest.Run(t, func(t *testing.T) sdk.Transport {
		tr, err := newTransport(sdk.Config{Rank: -1, Size: -1, LocalRank: -1})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	})
}
