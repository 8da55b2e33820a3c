// Package testcluster holds what the packages that stand up throwaway test
// clusters on this machine (slurmtest, gridenginetest, testhosts) and their
// commands share: making and removing a cluster's state directory (with
// the mounts a cluster may leave under it), the Need and Start helpers of
// tests, and the `NAME [--state DIR] up|down|status|env` command line.
//
// It knows nothing of any batch system: each fixture passes its own name
// (which prefixes errors), its Check, Up, Load and Down.
package testcluster
