// Package benchrank is the ranks' side of `gorun bench`: the measurement
// loop over a [collectives.Communicator] and its check of the results.
// Rank 0 writes each size's [collbench.Result] as a line on its standard
// output, which the head's [collbench.Collector] reads.
//
// It is apart from package collbench so that gorun, which runs the
// benchmark's head (its flags, the collector and the reports), links no
// collective runtime: the ranks run in gorun-tools, gorun's companion
// program ([Main]).
package benchrank
