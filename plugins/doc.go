// Package plugins hosts gorun's go-plugin subprocesses: it finds a plugin
// binary, starts it in its own process group with a parent-death signal,
// completes go-plugin's handshake over gRPC with mutual TLS, and stops it.
// It also holds what every gorun plugin shares on the wire: a JSON codec for
// gRPC, so that services are declared in Go rather than generated from
// protobuf files.
//
// A plugin runs as the user who runs gorun, so gorun runs only a binary
// that nobody else could have written or could replace ([CheckBinary]:
// OpenSSH's StrictModes rules, from / down), and without the job's
// secrets in its environment ([SecretEnv]).
//
// Shipped plugins live in subdirectories as main packages (plugins/pmix is
// the PMIx server the agent uses for Open MPI programs); their service
// definitions live next to them (plugins/pmixbridge).
package plugins
