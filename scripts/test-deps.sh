#!/usr/bin/env bash
# Installs the Debian packages gorun's test suite needs, when they are
# missing. Tests that need one of them fail (not skip) in CI without it.
# The list is what a minimal Debian 12 (debootstrap --variant=minbase, as
# a debian:12 container is) lacks for make test, with Go and make.
set -euo pipefail
pkgs=(
  python3-torch   # real PyTorch DDP (gloo) client, and /usr/bin/python3 for crash tests
  man-db groff-base  # man -l renders man/gorun.1 and man/gorun-hostfile.5 without warnings
  procps          # ps, for humans reading a failed test's log
  openssh-server  # /usr/sbin/sshd on each fake host of testhosts (SSH tests and benchmarks)
  hwloc           # lstopo, which the topology tests compare gorun's sysfs discovery with
  mpich libmpich-dev  # mpicc.mpich and a real MPICH program for the PMI-1 server tests
  openmpi-bin libopenmpi-dev  # mpicc.openmpi, Open MPI programs under gorun-pmix, mpirun for benchmarks
  libpmix-dev pkg-config gcc  # gorun-pmix links libpmix with cgo (go vet and go build ./... build it too)
  python3-mpi4py  # mpi4py (linked to Open MPI by Debian) under gorun
  openssh-client  # ssh and ssh-keygen: the testhosts client side and launcher
  iproute2        # ip: testhosts' network namespaces, bridge, veths and routes
  util-linux mount  # unshare, nsenter and mount: testhosts' UTS and mount namespaces
  libfabric-dev libfabric-bin  # plugins/fabric/ofi links libfabric with cgo; its tests run the tcp;ofi_rxm and shm providers
  gdb elfutils    # gorun stacks: gdb and eu-stack read native ranks' stacks (the hang tests); not libc6-dbg: the verdict reads the same without it
  jq              # the README's transcripts pipe gorun's JSON through jq (TestREADMEExamples)
  zsh             # zsh -n checks the zsh completion script (TestCompletionZsh; skipped without it)
  git             # make check lists the Go files for gofmt with git ls-files
  ca-certificates # TLS roots: go fetches gorun's modules from the module proxy over https
  slurmctld slurmd slurm-client munge  # slurmtest's real Slurm cluster: slurmctld, one slurmd per node, munged, and sbatch/srun/squeue/scancel/scontrol/sinfo
  gridengine-master gridengine-exec gridengine-client  # gridenginetest's real Grid Engine cluster: sge_qmaster, one sge_execd per exec host, and qsub/qrsh/qstat/qdel/qconf
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "test-deps: missing Debian packages: ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
