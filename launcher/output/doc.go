// Package output is gorun's output multiplexer on the head node.
//
// Agents deliver the stdout and stderr of every rank to the head as chunks of
// bytes, possibly from several goroutines at once. A [Mux] writes those chunks
// either to gorun's own stdout and stderr or, when [Options.Dir] is set, to one
// file per rank and stream. Delivery is lossless and in order per (rank,
// stream).
//
// On gorun's own outputs the Mux keeps lines whole: it holds a pending partial
// line per (rank, stream) and writes complete lines in as few Write calls as
// possible, so bytes of different ranks never interleave inside a line. A
// partial line (a prompt, or binary data without newlines) is written anyway
// after [Options.FlushDelay], when it grows past 64 KiB, when the rank is
// closed with [Mux.CloseRank], or at [Mux.Close]. A single flusher goroutine
// handles the delay for all ranks.
//
// Without tags or timestamps bytes pass through unchanged (only delayed and
// batched), so binary output arrives byte-exact; nothing is ever inserted, so
// a flushed partial line of one rank may be followed directly by another
// rank's line. With [Options.Tag] or [Options.Timestamp] every output line
// starts with its prefix and no prefix appears inside a line: if another
// rank's line must be written while gorun's output is in the middle of a
// flushed partial line, a newline is written first, and the interrupted
// rank's continuation later starts a new, prefixed line. Stdout and stderr are
// tracked separately (or together, when they are the same writer).
//
// In directory mode bytes are written straight through to
// Dir/rank.<r>/stdout and Dir/rank.<r>/stderr, byte-exact and without tags
// (timestamps still apply per line if asked; tag options are ignored). Files
// are opened lazily and appended to, so a restarted job continues the same
// files; CloseRank closes a rank's files. [Mux.Notice] still writes to
// gorun's stderr.
//
// The first error writing to an output is returned once; after that the Mux
// keeps accepting data for that output and discards it, so the job can still
// finish and other outputs keep flowing.
//
// What it does not do: it does not read from agents or pipes, does not
// rotate, compress or limit files, does not interpret terminal control
// sequences, and does not protect against an output writer that blocks: all
// writes to gorun's outputs happen under one lock, so a stalled writer stalls
// the Mux (ordering is preferred over parallelism).
package output
