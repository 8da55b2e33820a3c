package topology

import (
	"os"
	"testing"
)

func TestCountGPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		root string
		want int
	}{
		// Two NVIDIA display/3D controllers, an NVIDIA audio function and a bridge.
		{"two gpus", "testdata/sysfs-2gpu", 2},
		{"no sysfs", "testdata/does-not-exist", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := CountGPUs(os.DirFS(tt.root)); got != tt.want {
				t.Fatalf("CountGPUs(%s) = %d, want %d", tt.root, got, tt.want)
			}
		})
	}
}
