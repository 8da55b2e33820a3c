// Package rendezvous is gorun's job-wide key-value store with fences, the
// PMI-1 wire server that MPICH ranks speak, and the small authenticated
// client protocol that gorun's own Go ranks use.
//
// The pieces fit together the way Hydra's proxies do:
//
//   - The head holds one [Store] for the job. Its members are the hosts
//     (agents), not the ranks: each agent makes one [Store.Fence] call per
//     fence, carrying the puts of all its local ranks, and receives the
//     merged key-values that the whole job put since the previous fence.
//   - Each agent serves its local ranks: MPICH ranks through a [PMIServer]
//     (PMI-1 "simple" wire protocol over PMI_FD or PMI_PORT+PMI_ID), gorun's
//     Go ranks through a [KVServer] (length-prefixed frames on a unix socket
//     in a 0700 directory, authenticated with a per-job secret). Both
//     answer gets from a local cache at once, and turn a barrier of all their
//     local ranks into one call of a [Fencer], which the agent forwards to
//     the head (in tests, [Store.Member] is that Fencer).
//
// The agent also asks its Go ranks, over their own connections and
// without a signal, for the stacks of their goroutines ([KVServer.Dump])
// and for their [Progress] in collective calls ([KVServer.Progress],
// [KVServer.Final]), which [Stragglers] compares across ranks; it counts
// every rank's rendezvous requests ([KVServer.Ops], [PMIServer.Ops]) to
// tell a rank that makes no progress.
//
// Nobody waits forever: a fence that cannot complete within its timeout
// fails with a [*FenceTimeoutError] naming the members that never arrived,
// and a member that leaves ([Store.Leave]) fails every waiter of its
// generation at once with a [*MemberLeftError] naming it.
//
// Nothing grows without bound either: what one rank may put, and what the
// whole job may hold, in a generation are [Budget]s (keys, and bytes of
// keys and values). A put over either fails with a [*BudgetError] that
// names the budget, and the rank's connection stays up; the defaults
// ([DefaultRankBudget], [DefaultJobBudget]) are far above what MPI
// libraries and gorun's collectives put.
//
// The package imports nothing else of gorun's.
package rendezvous
