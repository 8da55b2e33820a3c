#!/usr/bin/env bash
# Writes nodecheck's sysfs fixtures, laid out as Linux lays them out
# (real directories under sys/devices, symbolic links in
# sys/bus/pci/devices, sys/class/net and sys/class/infiniband), with only
# the files topology and nodecheck read. Run from this directory; it
# replaces the trees it writes:
#
#   no-rdma    one CPU, no GPU, no RDMA device
#   rdma       four ConnectX-7 (0x15b3:0x1021) InfiniBand ports: two
#              ACTIVE at 400 Gb/s, one ACTIVE at 200 (a NIC at half rate),
#              one DOWN (physical state Disabled); a ConnectX-6 Dx
#              (0x15b3:0x101d) RoCE port ACTIVE at 100, another model, not
#              compared; a soft RoCE device (rxe0, virtual), left out
#   gpus       three NVIDIA GPUs at the PCI addresses the fake CUDA driver
#              gives its GPUs (0000:01:00.0, 0000:02:00.0, 0000:03:00.0):
#              GPUs 0 and 1 under one PCIe switch (PIX), GPU 2 under
#              another root port of the same root complex (PHB)
set -euo pipefail
cd "$(dirname "$0")"

R=

put() { mkdir -p "$(dirname "$R/$1")"; printf '%s\n' "$2" >"$R/$1"; }
link() { mkdir -p "$(dirname "$R/$1")"; ln -sfn "$2" "$R/$1"; }

cpus() {
  put sys/devices/system/cpu/online 0
  put sys/devices/system/cpu/cpu0/topology/core_id 0
  put sys/devices/system/cpu/cpu0/topology/physical_package_id 0
  put sys/devices/system/cpu/cpu0/topology/thread_siblings_list 0
  put sys/devices/system/node/node0/cpulist 0
  put sys/devices/system/node/node0/meminfo 'Node 0 MemTotal:       16000000 kB'
}

# pci PATH CLASS VENDOR DEVICE: PATH under sys/devices, its last
# component the bus ID.
pci() {
  local bdf=${1##*/} d=sys/devices/$1
  put $d/class "$2"; put $d/vendor "$3"; put $d/device "$4"; put $d/numa_node 0
  put $d/local_cpulist 0
  link sys/bus/pci/devices/$bdf ../../../devices/$1
}

# ibport PCIPATH DEV NETDEV STATE PHYS RATE LAYER: an RDMA device of one
# port on PCI function PCIPATH, with its netdev.
ibport() {
  local d=sys/devices/$1/infiniband/$2
  put $d/ports/1/state "$4"; put $d/ports/1/phys_state "$5"
  put $d/ports/1/rate "$6"; put $d/ports/1/link_layer "$7"
  link $d/device ../../../${1##*/}
  link sys/class/infiniband/$2 ../../devices/$1/infiniband/$2
  put sys/devices/$1/net/$3/operstate "$([ "${4#*: }" = ACTIVE ] && echo up || echo down)"
  link sys/class/net/$3 ../../devices/$1/net/$3
}

rm -rf no-rdma rdma gpus

R=no-rdma
cpus

R=rdma
cpus
for i in 1 2 3 4 5; do pci pci0000:00/0000:00:0$i.0 0x060400 0x8086 0x347a; done
for i in 1 2 3 4; do pci pci0000:00/0000:00:0$i.0/0000:0$i:00.0 0x020700 0x15b3 0x1021; done
pci pci0000:00/0000:00:05.0/0000:05:00.0 0x020000 0x15b3 0x101d
ibport pci0000:00/0000:00:01.0/0000:01:00.0 mlx5_0 ib0 '4: ACTIVE' '5: LinkUp' '400 Gb/sec (4X NDR)' InfiniBand
ibport pci0000:00/0000:00:02.0/0000:02:00.0 mlx5_1 ib1 '4: ACTIVE' '5: LinkUp' '200 Gb/sec (4X HDR)' InfiniBand
ibport pci0000:00/0000:00:03.0/0000:03:00.0 mlx5_2 ib2 '1: DOWN' '3: Disabled' '10 Gb/sec (4X SDR)' InfiniBand
ibport pci0000:00/0000:00:04.0/0000:04:00.0 mlx5_3 ib3 '4: ACTIVE' '5: LinkUp' '400 Gb/sec (4X NDR)' InfiniBand
ibport pci0000:00/0000:00:05.0/0000:05:00.0 mlx5_4 eth0 '4: ACTIVE' '5: LinkUp' '100 Gb/sec (2X HDR)' Ethernet
d=sys/devices/virtual/infiniband/rxe0
put $d/ports/1/state '4: ACTIVE'; put $d/ports/1/phys_state '5: LinkUp'
put $d/ports/1/rate '10 Gb/sec (1X QDR)'; put $d/ports/1/link_layer Ethernet
link sys/class/infiniband/rxe0 ../../devices/virtual/infiniband/rxe0

R=gpus
cpus
pci pci0000:00/0000:00:01.0 0x060400 0x8086 0x347a
pci pci0000:00/0000:00:01.0/0000:10:00.0 0x060400 0x1000 0xc030
pci pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0 0x060400 0x1000 0xc030
pci pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:01.0 0x060400 0x1000 0xc030
pci pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:01:00.0 0x030200 0x10de 0x2330
pci pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:01.0/0000:02:00.0 0x030200 0x10de 0x2330
pci pci0000:00/0000:00:02.0 0x060400 0x8086 0x347a
pci pci0000:00/0000:00:02.0/0000:03:00.0 0x030200 0x10de 0x2330
