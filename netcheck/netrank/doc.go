// Package netrank is the ranks' side of `gorun check --net`: one rank
// per host, in rounds of disjoint pairs (netcheck.Rounds), each pair
// measuring its round-trip time and its bandwidth one way then the other
// over the job's communicator (TCP between hosts, or the --plugin
// transport; as many streams as the communicator uses). Rank 0 gathers
// what every rank measured and writes it as lines on its standard
// output, which the head's netcheck.Collector reads.
//
// It is apart from package netcheck so that gorun, which runs the check's
// head, links no collective runtime: the ranks run in gorun-tools
// ([Main]).
package netrank
