package sdktest

import (
	"testing"

	"github.com/gorun/gorun/plugins/internal/memcontract"
	"github.com/gorun/gorun/plugins/sdk"
)

// RunMemory runs the device memory contract against the sdk.Memory that
// newMemory makes (called once per subtest; RunMemory closes it): round
// trips whole and at offsets, reads, writes, copies and frees out of
// bounds failing, copies on the device, and every reduction (sum, min and
// max of float32, float16 and bfloat16) against the CPU. Export and
// Import need two processes (CUDA refuses a process its own export):
// gorun plugins test checks them through two plugin processes.
func RunMemory(t *testing.T, newMemory func(t *testing.T) sdk.Memory) {
	memcontract.Run(t, func(t *testing.T) memcontract.Mem {
		m := newMemory(t)
		if m == nil {
			t.Fatal("newMemory returned nil")
		}
		t.Cleanup(func() {
			if err := m.Close(); err != nil {
				t.Errorf("Memory.Close: %v", err)
			}
		})
		return m
	}, false)
}
