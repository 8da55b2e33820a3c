// Package hostfile parses every host-list syntax gorun accepts and turns it
// into a list of [Host] values.
//
// The syntaxes are:
//
//   - hostfiles ([ParseFile], [Parse]), one host per line, in Open MPI style
//     ("alice@node1 slots=4 max_slots=8 port=2222") or MPICH style
//     ("node1:4");
//   - the -H host list ([ParseHostList]): "a:2,b:2,alice@c,node[01-04]:2";
//   - Slurm nodelists ([ExpandNodelist]) and SLURM_TASKS_PER_NODE
//     ([ParseTasksPerNode]), and the two together ([FromSlurm]);
//   - PBS_NODEFILE ([ParsePBSNodefile]), one line per slot;
//   - DeepSpeed --include / --exclude filters ([ParseFilter], [Include],
//     [Exclude]);
//   - Open MPI rankfiles ([ParseRankfileFile], [ParseRankfile]), one rank
//     a line with its host and cores ("rank 0=node1 slot=0:1").
//
// A host name that must be one of the hosts and is not (a rankfile's, a
// filter's) is an [*UnknownHostError] that names the closest one
// ([Closest]): a typo gets "did you mean h2?".
//
// In every syntax a host named more than once counts once, in the position of
// its first appearance, with the slots of all its mentions added up.
//
// The package only parses. It does not read environment variables, resolve
// host names, contact hosts, or decide which syntax applies; the only I/O it
// does is reading the file named to [ParseFile], [ParsePBSNodefile] or
// [ParseRankfileFile]. The man page gorun-hostfile(5) describes the
// syntaxes for users.
//
// Syntax errors, including limits exceeded and a Slurm nodelist and task
// list of different lengths, wrap [ErrSyntax]; errors tied to one line of a
// file or one item of a -H list are [*LineError] values naming the file, the
// line and the offending text. I/O errors and the errors of [Include] and
// [Exclude] (a well-formed filter that does not fit the hosts) do not wrap
// ErrSyntax. Inputs are bounded: a line longer than 4096 bytes, more than
// 100000 distinct hosts, a number over 1000000, or a range expanding to more
// than 1000000 names is an error; ranges and repeat counts are checked before
// they are expanded.
package hostfile
