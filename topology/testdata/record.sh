#!/usr/bin/env bash
# Records the sysfs files topology reads from this machine's /sys into
# testdata/<name> (default this-vm): CPU and NUMA topology, PCI devices
# with their real paths (symbolic links kept as links), and the
# network and InfiniBand devices backed by PCI. Virtual network
# interfaces are left out. Usage: testdata/record.sh [name]
set -euo pipefail
cd "$(dirname "$0")"
R=${1:-this-vm}
rm -rf "$R/sys"

copy() { # copy FILE (absolute, under /sys) if readable
  [ -r "$1" ] || return 0
  mkdir -p "$R$(dirname "$1")"
  cat "$1" >"$R$1" 2>/dev/null || rm -f "$R$1"
}
link() { # link LINK (absolute, under /sys): recreate the symbolic link
  mkdir -p "$R$(dirname "$1")"
  ln -sfn "$(readlink "$1")" "$R$1"
}

copy /sys/devices/system/cpu/online
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  for f in core_id physical_package_id thread_siblings_list; do copy "$c/topology/$f"; done
done
for n in /sys/devices/system/node/node[0-9]*; do
  copy "$n/cpulist"; copy "$n/meminfo"
done
for d in /sys/bus/pci/devices/*; do
  real=$(realpath "$d")
  for f in class vendor device numa_node local_cpulist; do copy "$real/$f"; done
  link "$d"
done
for d in /sys/class/net/* /sys/class/infiniband/*; do
  [ -e "$d" ] || continue
  real=$(realpath "$d")
  case $real in /sys/devices/virtual/*) continue ;; esac
  for f in speed operstate; do copy "$real/$f"; done
  for p in "$real"/ports/*; do
    [ -d "$p" ] && { copy "$p/state"; copy "$p/rate"; }
  done
  link "$d"
done
echo "recorded $(find "$R/sys" -type f | wc -l) files into $R"
