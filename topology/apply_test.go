package topology

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary plays two parts for TestBindExec: "bind" applies a
// binding and execs itself as "report", which prints what the kernel says
// the exec'd process is bound to.
func init() {
	switch os.Getenv("GORUN_TOPOLOGY_TEST") {
	case "bind":
		cpus, _ := ParseCPUList(os.Getenv("GORUN_TOPOLOGY_CPUS"))
		var mems []int
		if m := os.Getenv("GORUN_TOPOLOGY_MEMS"); m != "" {
			n, _ := strconv.Atoi(m)
			mems = []int{n}
		}
		exe, _ := os.Executable()
		// The first of duplicate variables wins: replace, do not append.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GORUN_TOPOLOGY_TEST=") {
				env = append(env, kv)
			}
		}
		env = append(env, "GORUN_TOPOLOGY_TEST=report")
		err := BindExec(cpus, mems, exe, []string{exe}, env)
		fmt.Println("bind-exec failed:", err)
		os.Exit(1)
	case "report":
		runtime.LockOSThread()
		var set unix.CPUSet
		unix.SchedGetaffinity(0, &set)
		var cpus []string
		for i := 0; i < 1024; i++ {
			if set.IsSet(i) {
				cpus = append(cpus, strconv.Itoa(i))
			}
		}
		mode, nodes, err := MemPolicy()
		fmt.Printf("cpus=%s mode=%d nodes=%v err=%v\n", strings.Join(cpus, ","), mode, nodes, err)
		os.Exit(0)
	}
}

func TestBindExec(t *testing.T) {
	t.Parallel()
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to tell a binding from none")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	last := runtime.NumCPU() - 1
	tests := []struct {
		cpus, mems string
		want       string
	}{
		{strconv.Itoa(last), "0", fmt.Sprintf("cpus=%d mode=%d nodes=[0] err=<nil>", last, mpolBind)},
		{"0", "", fmt.Sprintf("cpus=0 mode=%d nodes=[] err=<nil>", mpolDefault)},
	}
	for _, tt := range tests {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "GORUN_TOPOLOGY_TEST=bind", "GORUN_TOPOLOGY_CPUS="+tt.cpus, "GORUN_TOPOLOGY_MEMS="+tt.mems)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tt.want {
			t.Errorf("bound to cpus %q mems %q: the exec'd process reports %q, want %q", tt.cpus, tt.mems, got, tt.want)
		}
	}
}
