// Package collbench runs and reports gorun's collective benchmarks
// (`gorun bench`) the way nccl-tests does: per message size, the time, the
// algorithm bandwidth and the bus bandwidth.
//
// A run yields one [Result] per message size. [Result.Fill] derives the
// algorithm bandwidth (bytes moved by the caller's buffer per second of the
// slowest rank) and the bus bandwidth (the algorithm bandwidth scaled by
// [BusFactor], so that it can be compared with the hardware's link speed
// whatever the collective and the number of ranks). [WriteTable] prints the
// results as nccl-tests' *_perf binaries do, [WriteCSV] and [WriteJSON] give
// them to other programs, and [WriteSVG] plots bus bandwidth against message
// size.
//
// [ParseSize], [Sizes] and [FormatSize] handle message sizes as nccl-tests'
// -b, -e, -f and -i options do.
//
// This package is the head's side and what both sides share; it links no
// collective runtime. The ranks' side is package
// [github.com/gorun/gorun/collbench/benchrank]: every rank of a
// communicator runs it with the same [Config] (from [EnvConfig]); rank 0
// writes each size's Result as a line (ResultPrefix, then JSON) to its
// standard output, which gorun relays to the head, where a [Collector]
// turns the lines into the live table and the files.
package collbench
