// Package topology discovers and models the node a rank runs on: its
// packages (sockets), NUMA nodes, cores and hardware threads, PCI devices
// and the PCIe paths up to their root complexes, GPUs and network
// interfaces, and the link between any two devices named as
// `nvidia-smi topo -m` names it (NV#, PIX, PXB, PHB, NODE, SYS).
//
// GPUs are NVIDIA's (NVML and sysfs) and AMD's and Intel's data-center
// GPUs (sysfs). Discovery reads sysfs always, through an fs.FS rooted at
// "/" so that recorded machines under testdata can stand in for the real
// one, and NVML (through github.com/NVIDIA/go-nvml in package nvmllib,
// behind this package's own NVML interface) when libnvidia-ml loads: NVML adds GPU UUIDs, memory sizes,
// NVLinks, peer-to-peer status and MIG mode, and orders the GPUs as CUDA
// and nvidia-smi do. Where NVML is absent (no library, no cgo) discovery
// falls back to sysfs alone (Node.NVMLStatus says why), and after a
// failed NVML Init no other NVML function is called.
//
// The model is a Node, which marshals to JSON; Matrix and FormatMatrix
// print the node the way `nvidia-smi topo -m` does. CountGPUs and
// LocalGPUs count GPUs cheaply, from sysfs only.
//
// PlanBindings plans which GPU, cores, memory and NIC each rank of a node
// gets, from typed options (BindOptions), the usable GPUs included
// (GPUGrant: the visibility lists package env reads, which this package
// places on the node's GPUs), as typed bindings (package env turns them
// into variables); PlanWithoutNode plans, without discovering the node, a
// launch that binds nothing; FormatBindings prints the bindings as
// --report-bindings does. The package reads no environment variable. Apply and
// BindExec bind a process (CPU affinity and a NUMA memory policy) and
// exec a program: the re-exec step a rank starts through, since Go cannot
// act between fork and exec. Record writes this machine as a fixture
// that Discover reads back.
package topology
