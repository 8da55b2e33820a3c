package launcher

import (
	"reflect"
	"testing"

	"github.com/gorun/gorun/topology"
)

func TestVisibleGPUs(t *testing.T) {
	t.Parallel()
	n := &topology.Node{GPUs: []topology.GPU{{Index: 0, UUID: "GPU-aaaa-1"}, {Index: 1, UUID: "GPU-bbbb-2"}, {Index: 2, UUID: "GPU-cccc-3"}}}
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "2,0", want: []int{2, 0}},
		{in: "GPU-bbbb-2", want: []int{1}},
		{in: "GPU-cccc", want: []int{2}}, // a UUID prefix, as CUDA accepts
		{in: "", want: []int{}},
		{in: "7", wantErr: true},
	}
	for _, tt := range tests {
		got, err := visibleGPUs(n, tt.in)
		if (err != nil) != tt.wantErr || !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("visibleGPUs(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	// --include w0:0,2 on a host whose CUDA_VISIBLE_DEVICES grants 2 and 1.
	if got := intersect([]int{0, 2}, []int{2, 1}); !reflect.DeepEqual(got, []int{2}) {
		t.Errorf("intersect = %v", got)
	}
}
