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
// gorun's stderr. With [Options.Tee] the ranks' streams reach gorun's
// outputs too, as without a directory.
//
// # Styles
//
// [Options.Style] chooses whose formats tags, timestamps and files take:
// gorun's own ([StyleGorun]), or Open MPI 4.1 mpirun's ([StyleOpenMPI]:
// "[1,0]<stdout>:" tags, "Wed Dec  2 00:30:56 2026" timestamps,
// Dir/1/rank.N files with N zero-padded, created for every rank at the
// start and prefixed as the terminal's lines are), for gorun mpirun.
// Hydra's -prepend-rank is gorun's "[rank] " tag without a host. The
// formats, as the peers printed them, are in testdata/peers.
//
// # Merging
//
// With [Options.Merge], on gorun's own outputs, a line that several ranks
// print alike is written once, as "[0-7] text" ("[0,2,4-6] text": runs of
// three or more ranks as ranges), after the timestamp if asked; every
// other line is written as with Tag ("[r] text", or the host's or the
// style's tag), so that no line of a merged output leaves out whose it
// is: a straggler's line that came after its group was written, too.
// Stdout and stderr are merged apart. [Options.Only] names the ranks
// waited for when they are not all of the job's.
//
// A rank's complete lines on a stream form a chain, in its order. Each
// pending line is in a group (a text and the ranks that printed it), and
// the groups wait in a queue that keeps every chain's order. A rank's
// line joins the first group of the same text that comes after the
// rank's last pending group, or an older one if the rank's last group
// (with what must stay before it) can move to just before that one
// without breaking a chain: so a rank that lags behind the others still
// joins their lines instead of leaving each of its own lines alone. A line
// that joins nothing starts a group at the tail. The group at the head of
// the queue is written when every rank still running has joined it (the
// job's [Options.Ranks]; [Mux.CloseRank] ends a rank, a later Write starts
// it again), when [Options.MergeWindow] has passed since the first line
// of the oldest pending group (so no line waits longer than one window),
// or when more than 64Ki lines (four per rank in larger jobs) or 16 MiB
// are held. Nothing is dropped: expanding each written line's ranks gives
// every rank's lines in its order.
//
// Partial lines, the rest of a line whose start was written, and lines
// longer than [MaxPartial] are never merged: they are written as without
// merging, after the rank's pending groups on that stream are written
// (the queue up to them goes out first). [Mux.Notice] and [Mux.Close]
// write every pending group first.
//
// The first error writing to an output is returned once; after that the Mux
// keeps accepting data for that output and discards it, so the job can still
// finish and other outputs keep flowing.
//
// What it does not do: it does not merge lines in files, does not
// read from agents or pipes, does not rotate, compress or limit files, does
// not interpret terminal control sequences, and does not protect against an
// output writer that blocks: all writes to gorun's outputs happen under one
// lock, so a stalled writer stalls the Mux (ordering is preferred over
// parallelism).
package output
