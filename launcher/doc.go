// Package launcher runs a job: it maps ranks to hosts ([NewPlan]), starts
// one agent per host through a [Starter], and supervises the job from the
// head ([Run]): output, stdin, signals, the failure policy, restarts, the
// summary and the exit code. The agent side ([RunAgent]) is the same
// binary run as `gorun agent` on each host: it starts the host's ranks in
// their own process groups, relays their output and exit status over the
// control protocol (package control), and kills everything it started
// when the head goes away.
//
// The launcher computes no rank environment itself (package env does) and
// parses no host syntax (package hostfile does).
package launcher
