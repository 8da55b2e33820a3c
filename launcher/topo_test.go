package launcher

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gorun/gorun/hostfile"
)

// Hosts whose topology differs from the others get one warning each.
func TestCompareTopo(t *testing.T) {
	t.Parallel()
	var errb bytes.Buffer
	p, err := NewPlan([]hostfile.Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}, {Name: "c", Slots: 1}}, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &head{o: Options{Stderr: &errb}, plan: p}
	dgx := "2 packages, 2 NUMA nodes, 224 CPUs, 8 GPUs, 8 NICs up"
	h.compareTopo(0, dgx)
	h.compareTopo(1, dgx)
	h.compareTopo(2, "2 packages, 2 NUMA nodes, 224 CPUs, 7 GPUs, 8 NICs up")
	h.compareTopo(2, "2 packages, 2 NUMA nodes, 224 CPUs, 7 GPUs, 8 NICs up") // a restart: no second warning
	got := errb.String()
	if strings.Count(got, "warning") != 1 || !strings.Contains(got, "c differs from a") || !strings.Contains(got, "7 GPUs") {
		t.Fatalf("warnings:\n%s", got)
	}
}
