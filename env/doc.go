// Package env computes the environment a rank starts with: gorun's own
// GORUN_* variables, the names torch's env:// rendezvous and torchrun
// users expect (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), the
// Open MPI-compatible OMPI_COMM_WORLD_* names, MVAPICH's MV2_COMM_WORLD_*
// and Horovod's HOROVOD_* ([CrossRanks]), the variables that follow from a
// rank's binding ([Bindings]: GPU visibility and order, UCX's NIC,
// OpenMP's threads, from package topology's typed plan), torchrun's
// OMP_NUM_THREADS=1 for unbound ranks that share a host
// ([DefaultThreads]), and the user's -x exports.
//
// GPU defaults follow what GPU jobs expect: every GPU the job may use
// stays visible to every rank, local rank i is bound next to GPU i, which
// its runtime numbers i, and no NCCL variable differs between the ranks of
// a node. Narrowing each rank to its own GPU is GPUBindSingle.
//
// It is also the one place that reads the user's variables that shape a
// binding ([ReadUserVars]: the GPU visibility lists, Slurm's CPUs on the
// node, the names the user set), into a typed value that the launcher
// turns into topology's options.
//
// It is the one place in gorun that decides a rank's variables: the agent
// calls [Build] for every rank it starts, and `gorun --print-env` shows the
// result of the same call. The package does no I/O and reads no process
// state: the base environment and every value come in as arguments.
package env
