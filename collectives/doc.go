// Package collectives gives Go ranks the collective operations of MPI and
// NCCL over gorun's point-to-point transports: AllReduce (sum, product,
// min, max, average), Broadcast, Reduce, AllGather, ReduceScatter,
// AllToAll, Barrier, and Send/Recv, on []float32, []float64, []int32,
// []int64, []uint8, and bfloat16 and float16 stored as [BFloat16] and
// [Float16] (reduced in float32), each blocking or asynchronous (the
// ...Async forms return a [*Request] to Wait on, so that computation
// overlaps communication), on a [Communicator] or on the sub-communicators
// that [Communicator.Split] makes.
//
//	c, err := collectives.New(p2p, rank, size, nil)
//	...
//	err = collectives.AllReduce(ctx, c, grads, collectives.Avg)
//
// # Transports
//
// A Go rank that gorun started joins its job with [Init]:
//
//	c, err := collectives.Init(ctx, nil) // every rank of the job
//	...
//	defer c.Close()
//
// Init reads the rank, the world size and the host from gorun's
// environment and connects through the agent's rendezvous store: every
// rank listens, publishes its addresses, fences, then connects to every
// other rank, over shared memory (package transport/shm: memfd rings) to
// the ranks of its host and over TCP (package transport/tcp: two streams
// per peer by default, the interface gorun's --iface names or the one
// that routes to rank 0's host) to the others. GORUN_COLL_TRANSPORT
// forces one transport, GORUN_COLL_IFACE and GORUN_COLL_STREAMS tune TCP.
// [InitWith] does the same from a [Setup], for a rank that holds its own
// rendezvous client (the agent accepts one connection per rank) or a test
// that runs ranks as goroutines. A waiting rank polls its shared-memory
// connections itself for up to 100 µs before it blocks, and yields the
// CPU at every turn where its host runs more ranks than it has CPUs; run
// one rank per core, with GOMAXPROCS near the cores each rank has (gorun
// bench sets it so).
//
// Underneath, a Communicator runs over a [P2P]: tagged, asynchronous
// point-to-point messages between ranks, and the host of each rank. P2P is
// defined here, where it is consumed, and kept small: Init builds one from
// package transport's connections and calls [New]; package
// collectivestest provides one over memory, with fault injection, so that
// tests run N ranks as goroutines.
//
// # Algorithms
//
// Each collective has several algorithms ([Collective.Algorithms]): ring
// (pipelined, in chunks) for large messages; recursive doubling,
// Rabenseifner (recursive-halving reduce-scatter then recursive-doubling
// allgather) and Bruck for small and medium ones; binomial trees, pipelined
// chains and binary trees, scatter-allgather and reduce-scatter-gather for
// Broadcast and Reduce; Bruck, linear and pairwise exchanges for AllToAll;
// a dissemination barrier. All work for any number of ranks (ranks beyond
// a power of two fold into partners) and any length, including zero and
// lengths that do not divide by the number of ranks. When a communicator
// spans hosts and some host has more than one of its ranks, AllReduce,
// Broadcast and Reduce run hierarchically: inside each host, then across
// hosts, then inside again (for large AllReduce on hosts with equal rank
// counts, every local rank reduces its shard across hosts).
//
// Which algorithm runs is decided by a table of crossover sizes per
// collective and link class ([Thresholds]: inside a host or across hosts),
// which prints and parses as text, can be replaced in [Options] or
// overridden entry by entry with the environment variable
// GORUN_COLL_THRESHOLDS. [CostModel] estimates each algorithm from the
// latency and bandwidths of each link class and derives a table from them;
// [Communicator.Choose] says what a communicator runs for a collective and
// size, with the model's estimate.
//
// # Errors
//
// No operation waits forever. Every message carries a header naming the
// call (collective, element type, operator, count, root, algorithm), so a
// rank that made a different call than its peers is detected (ErrMismatch)
// instead of corrupting data; a rank that dies, loses its connection or
// closes its Communicator is detected (ErrPeerGone); a peer that stays
// silent is given up on after [Options.Timeout] (ErrTimeout). The rank that
// detects a failure tells the others, so every rank's error is a
// [*PeerError] that names the rank at fault, and the Communicator is broken
// from then on. A rank whose part of the failed operation depended on the
// failed rank gets the error from that call; the others get it from their
// next call ([Options.Strict] makes every rank get it from the same call,
// at the cost of two barriers per collective).
//
// # Progress
//
// Every collective call records when this rank entered it, in a fixed ring
// of the recent [ProgressArrivals] calls ([Communicator.Progress]); the
// call is named the same on every rank of its communicator, so that
// [rendezvous.Stragglers] can tell, from the ranks' Progress, which rank
// keeps the others waiting and by how much. A rank of [Init] reports its
// Progress, and the stacks of its goroutines, to its gorun agent when
// asked, over its rendezvous connection.
//
// # What it does not do
//
// It moves host memory only (GPU buffers are NCCL's business), offers only
// commutative reductions and no variable-count (v) collectives beyond the
// block layout of [BlockRange], and does not fuse small operations
// (Horovod-style) or pick NICs: the transports do.
package collectives
