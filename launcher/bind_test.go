package launcher

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/launcher/control"
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

// GPUs Slurm granted but gorun cannot see are shared one per rank, in the
// order CUDA_VISIBLE_DEVICES names them; without Slurm's grant, or with
// the user's own -x CUDA_VISIBLE_DEVICES, nothing changes.
func TestUnboundHints(t *testing.T) {
	l := control.Launch{Ranks: make([]control.RankSpec, 3)}
	slurm := []string{"SLURM_JOB_GPUS=2,3", "CUDA_VISIBLE_DEVICES=2,3"}
	plan := unboundHints(l, slurm)
	var got []string
	for _, b := range plan {
		got = append(got, strings.Join(b.Env, " "))
	}
	if strings.Join(got, "|") != "CUDA_VISIBLE_DEVICES=2|CUDA_VISIBLE_DEVICES=3|CUDA_VISIBLE_DEVICES=2" {
		t.Errorf("granted 2,3 to 3 ranks: %q", got)
	}
	if p := unboundHints(l, []string{"CUDA_VISIBLE_DEVICES=0,1"}); p != nil {
		t.Errorf("without Slurm's grant: %v", p)
	}
	l.Exports = []string{"CUDA_VISIBLE_DEVICES=1"}
	if p := unboundHints(l, slurm); p != nil {
		t.Errorf("with -x CUDA_VISIBLE_DEVICES: %v", p)
	}
	// SLURM_CPUS_ON_NODE is divided among the node's ranks.
	l.Exports = nil
	p := unboundHints(l, []string{"SLURM_CPUS_ON_NODE=8"})
	if len(p) != 3 || strings.Join(p[2].Env, " ") != "OMP_NUM_THREADS=2" {
		t.Errorf("8 CPUs for 3 ranks: %v", p)
	}
	if p := unboundHints(l, []string{"SLURM_CPUS_ON_NODE=8", "OMP_NUM_THREADS=4"}); p != nil {
		t.Errorf("with the user's OMP_NUM_THREADS: %v", p)
	}
}
