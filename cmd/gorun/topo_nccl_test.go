package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gorun topo --nccl-topo writes a recorded machine's NCCL topology, to
// standard output with "-" and to a file otherwise, the same XML that
// topology's golden file holds; a file it cannot write is an error.
func TestTopoNCCLTopo(t *testing.T) {
	t.Parallel()
	const machine = "../../topology/testdata/pcie-4gpu"
	want, err := os.ReadFile("../../topology/testdata/pcie-4gpu.nccl-topo.xml")
	if err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, 30*time.Second, nil, "topo", "--machine", machine, "--nccl-topo", "-")
	if r.code != 0 || r.stdout != string(want) {
		t.Errorf("topo --nccl-topo -: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", r.code, r.stderr, r.stdout, want)
	}
	file := filepath.Join(t.TempDir(), "topo.xml")
	r = runGorun(t, 30*time.Second, nil, "topo", "--machine", machine, "--nccl-topo", file)
	got, err := os.ReadFile(file)
	if r.code != 0 || err != nil || string(got) != string(want) {
		t.Errorf("topo --nccl-topo %s: exit %d, %v, stderr %q, file:\n%s", file, r.code, err, r.stderr, got)
	}
	if !strings.Contains(r.stdout, "4 NVIDIA GPU(s) and 2 NIC(s)") || !strings.Contains(r.stdout, "NCCL_TOPO_FILE="+file) {
		t.Errorf("topo --nccl-topo %s says %q", file, r.stdout)
	}
	r = runGorun(t, 30*time.Second, nil, "topo", "--machine", machine, "--nccl-topo", filepath.Join(file, "no", "such"))
	if r.code != 1 || !strings.Contains(r.stderr, "--nccl-topo") {
		t.Errorf("topo --nccl-topo into a missing directory: exit %d, stderr %q", r.code, r.stderr)
	}
}
