// Package netcheck is the head's side of `gorun check --net`: it measures
// every host pair's bandwidth, both ways, and round-trip latency over the
// transport a job would use, and says which host or which link is slow.
//
// The job runs one rank per host (package
// [github.com/gorun/gorun/netcheck/netrank], in gorun-tools) in rounds of
// disjoint pairs ([Rounds]: N-1 rounds for N hosts, N when N is odd), so
// that the whole matrix takes O(N) rounds. Rank 0 writes what it gathered
// as lines on its standard output ([InfoPrefix], [LinkPrefix],
// [NodePrefix], each followed by JSON), which gorun relays to the head,
// where a [Collector] picks them out.
//
// [Analyze] flags every link below a fraction of the cluster's median, or
// below an expected rate, and ends with a verdict that names the host or
// the link. [WriteMatrix] prints the matrix as `nvidia-smi topo -m` prints
// its own, [WriteJSON] gives it to other programs and [WriteSVG] draws it
// as a heat map.
//
// This package links no collective runtime: gorun links it.
package netcheck
