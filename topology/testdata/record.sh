#!/usr/bin/env bash
# Records this machine into testdata/<name> (default this-vm) with
# `gorun topo --record`: the sysfs files topology reads (CPU and NUMA
# topology, PCI devices at their real paths, symbolic links kept as
# links, network and InfiniBand devices backed by PCI) and, where NVML
# answers, testdata/<name>/nvml.json. Usage: testdata/record.sh [name]
set -euo pipefail
cd "$(dirname "$0")"
R=${1:-this-vm}
rm -rf "$R/sys" "$R/nvml.json"
exec go run ../../cmd/gorun topo --record "$R"
