package hostfile_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gorun/gorun/hostfile"
)

func ExampleParse() {
	src := `# two nodes, Open MPI and MPICH style
alice@node1 slots=4 max_slots=8 port=2222
node2:2
node2        # a repeated host adds a slot
`
	hosts, err := hostfile.Parse(strings.NewReader(src), "hosts")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range hosts {
		fmt.Println(h)
	}
	fmt.Println("total", hostfile.Total(hosts))
	// Output:
	// alice@node1 slots=4 max_slots=8 port=2222
	// node2 slots=3
	// total 7
}

func ExampleParse_error() {
	_, err := hostfile.Parse(strings.NewReader("node0\nnode1 slots=x\n"), "hosts")
	fmt.Println(err)
	var le *hostfile.LineError
	fmt.Println(errors.As(err, &le), le.Line, errors.Is(err, hostfile.ErrSyntax))
	// Output:
	// hostfile hosts:2: bad slots value "x" in "node1 slots=x"
	// true 2 true
}

func ExampleParseHostList() {
	hosts, err := hostfile.ParseHostList("a:2,bob@node[1,3]:2,a")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range hosts {
		fmt.Println(h)
	}
	_, err = hostfile.ParseHostList("a:2,b:x")
	fmt.Println(err)
	// Output:
	// a slots=3
	// bob@node1 slots=2
	// bob@node3 slots=2
	// -H item 2 "b:x": bad slots value "x"
}

func ExampleExpandNodelist() {
	names, err := hostfile.ExpandNodelist("node[01-04,07],gpu-[1-2],r[1-2]n[1-2]")
	fmt.Println(names, err)
	_, err = hostfile.ExpandNodelist("n[0-999999999]")
	fmt.Println(err)
	// Output:
	// [node01 node02 node03 node04 node07 gpu-1 gpu-2 r1n1 r1n2 r2n1 r2n2] <nil>
	// hostfile: nodelist "n[0-999999999]": range [0-999999999] has more than 1000000 numbers
}

func ExampleParseTasksPerNode() {
	counts, err := hostfile.ParseTasksPerNode("2(x3),1")
	fmt.Println(counts, err)
	// Output: [2 2 2 1] <nil>
}

func ExampleFromSlurm() {
	hosts, err := hostfile.FromSlurm("gpu[01-03]", "8(x2),4")
	fmt.Println(hosts, err)
	_, err = hostfile.FromSlurm("gpu[01-03]", "8(x2)")
	fmt.Println(err)
	// Output:
	// [gpu01 slots=8 gpu02 slots=8 gpu03 slots=4] <nil>
	// hostfile: nodelist "gpu[01-03]" has 3 nodes but tasks per node "8(x2)" has 2 counts
}

func ExampleInclude() {
	hosts, _ := hostfile.ParseHostList("w0:4,w1:4,w2:4")
	f, err := hostfile.ParseFilter("w2@w1:0,2")
	if err != nil {
		fmt.Println(err)
		return
	}
	kept, err := hostfile.Include(hosts, f)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range kept {
		fmt.Println(h.Name, h.Slots, h.GPUs)
	}
	// Output:
	// w1 2 [0 2]
	// w2 4 []
}

func ExampleExclude() {
	hosts, _ := hostfile.ParseHostList("w0:4,w1:4,w2:4")
	f, _ := hostfile.ParseFilter("w0@w1:0,2")
	kept, err := hostfile.Exclude(hosts, f)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range kept {
		fmt.Println(h.Name, h.Slots, h.GPUs)
	}
	_, err = hostfile.Exclude(hosts, mustFilter("w1:7"))
	fmt.Println(err)
	// Output:
	// w1 2 [1 3]
	// w2 4 []
	// hostfile: exclude "w1:7": host w1 has no slot 7 (slots 0-3)
}

func mustFilter(s string) hostfile.Filter {
	f, err := hostfile.ParseFilter(s)
	if err != nil {
		panic(err)
	}
	return f
}

func ExampleParseFile() {
	hosts, err := hostfile.ParseFile("testdata/mpich.hosts")
	fmt.Println(hosts, err)
	// Output: [node1 slots=4 node2 slots=2 node3 slots=1] <nil>
}

func ExampleParsePBSNodefile() {
	hosts, err := hostfile.ParsePBSNodefile("testdata/pbs/nodefile")
	fmt.Println(hosts, err)
	// Output: [n1 slots=3 n2 slots=2 n3 slots=1] <nil>
}

func ExampleHost_String() {
	h := hostfile.Host{Name: "fe80::1", Slots: 2, MaxSlots: 4, User: "alice", Port: 2222}
	fmt.Println(h)
	// Output: alice@[fe80::1] slots=2 max_slots=4 port=2222
}
