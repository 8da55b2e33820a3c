// Package nvmllib is the NVML library (libnvidia-ml, through go-nvml) as
// topology.Discover asks it about GPUs. It is a package of its own so that
// what imports topology (the environment, the transports, the plugin SDK)
// does not compile NVML's cgo: only the agent and gorun's topology command
// load it. A build without cgo gets an NVML whose Init fails with
// topology.ErrNoCgo.
package nvmllib
