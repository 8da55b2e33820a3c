// Package topology describes the node a rank runs on. For now it counts
// GPUs from sysfs, which is what gorun needs to choose the default number
// of local slots; discovery of NUMA nodes, PCIe paths, NICs and NVLinks,
// and binding, come later.
package topology
