#!/usr/bin/env bash
# Writes the hand-built sysfs fixtures of topology's tests (dgx-h100,
# pcie-4gpu, cpu-2s): only the files the code reads, laid out as Linux
# lays them out (real directories under sys/devices, symbolic links in
# sys/bus/pci/devices, sys/class/net and sys/class/infiniband). Run from
# this directory; it replaces those three trees. The NVML side of each
# machine is its nvml.json, written by hand.
set -euo pipefail
cd "$(dirname "$0")"

R= # the fixture root being written

put() { mkdir -p "$(dirname "$R/$1")"; printf '%s\n' "$2" >"$R/$1"; }

# cpu ID CORE PACKAGE SIBLINGS
cpu() {
  local d=sys/devices/system/cpu/cpu$1/topology
  put $d/core_id "$2"; put $d/physical_package_id "$3"; put $d/thread_siblings_list "$4"
}

# node ID CPULIST MEMTOTAL_KB
node() {
  put sys/devices/system/node/node$1/cpulist "$2"
  put sys/devices/system/node/node$1/meminfo "$(printf 'Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB' "$1" "$3" "$1" $(($3 / 2)))"
}

# pci PATH CLASS VENDOR DEVICE NUMA: PATH is under sys/devices, e.g.
# pci0000:15/0000:15:01.0/0000:16:00.0; its last component is the bus ID.
pci() {
  local bdf=${1##*/} d=sys/devices/$1
  put $d/class "$2"; put $d/vendor "$3"; put $d/device "$4"; put $d/numa_node "$5"
  mkdir -p "$R/sys/bus/pci/devices"
  ln -sfn "../../../devices/$1" "$R/sys/bus/pci/devices/$bdf"
}

# net NAME PCIPATH SPEED OPERSTATE (PCIPATH "virtual" for a virtual one)
net() {
  local d
  if [ "$2" = virtual ]; then d=sys/devices/virtual/net/$1; else d=sys/devices/$2/net/$1; fi
  put $d/speed "$3"; put $d/operstate "$4"
  mkdir -p "$R/sys/class/net"
  ln -sfn "../../${d#sys/}" "$R/sys/class/net/$1"
}

# ib NAME PCIPATH STATE RATE
ib() {
  local d=sys/devices/$2/infiniband/$1
  put $d/ports/1/state "$3"; put $d/ports/1/rate "$4"
  mkdir -p "$R/sys/class/infiniband"
  ln -sfn "../../${d#sys/}" "$R/sys/class/infiniband/$1"
}

# cpus SOCKETS CORES THREADS [CORE_IDS...]: Linux numbering, first
# threads of every core of socket 0, then socket 1, ..., then the second
# threads in the same order.
cpus() {
  local s=$1 c=$2 t=$3; shift 3
  local ids=("$@") total=$((s * c * t))
  [ ${#ids[@]} -gt 0 ] || ids=($(seq 0 $((c - 1))))
  put sys/devices/system/cpu/online "0-$((total - 1))"
  for ((p = 0; p < s; p++)); do
    for ((k = 0; k < c; k++)); do
      local first=$((p * c + k)) sib="" th
      for ((th = 0; th < t; th++)); do sib+="${sib:+,}$((first + th * s * c))"; done
      for ((th = 0; th < t; th++)); do cpu $((first + th * s * c)) "${ids[$k]}" $p "$sib"; done
    done
  done
}

# ---- dgx-h100: 2 x Xeon Platinum 8480C (56 cores, 2 threads), 2 NUMA
# nodes, 8 H100 SXM5 and 8 ConnectX-7 NDR HCAs. Each GPU shares a
# Broadcom PCIe switch with one HCA under its own root port and root
# complex; GPUs and HCAs 0-3 on socket 0, 4-7 on socket 1.
R=dgx-h100; rm -rf "$R/sys"
cpus 2 56 2
node 0 0-55,112-167 1056350524
node 1 56-111,168-223 1056903500
i=0
for hb in 15:16:17:18:1b 3d:3e:3f:40:43 4c:4d:4e:4f:52 5b:5c:5d:5e:61 97:98:99:9a:9d bd:be:bf:c0:c3 cb:cc:cd:ce:d1 d9:da:db:dc:df; do
  IFS=: read -r h u d nic gpu <<<"$hb"
  numa=$((i / 4))
  rp=pci0000:$h/0000:$h:01.0
  pci $rp 0x060400 0x8086 0x352a $numa
  pci $rp/0000:$u:00.0 0x060400 0x1000 0xc030 $numa
  pci $rp/0000:$u:00.0/0000:$d:00.0 0x060400 0x1000 0xc030 $numa
  pci $rp/0000:$u:00.0/0000:$d:02.0 0x060400 0x1000 0xc030 $numa
  nicp=$rp/0000:$u:00.0/0000:$d:00.0/0000:$nic:00.0
  pci $nicp 0x020700 0x15b3 0x1021 $numa
  pci $rp/0000:$u:00.0/0000:$d:02.0/0000:$gpu:00.0 0x030200 0x10de 0x2330 $numa
  net ibp$((16#$nic))s0 $nicp 400000 up
  ib mlx5_$i $nicp "4: ACTIVE" "400 Gb/sec (4X NDR)"
  i=$((i + 1))
done
net lo virtual -1 unknown

# ---- pcie-4gpu: 2 x EPYC 72F3 (8 cores, 2 threads), NPS1, 4 A100 PCIe
# without NVLink bridges, one dual-port ConnectX-6 Dx (RoCE). The
# firmware gives socket 1's root complexes the low bus numbers, so GPUs
# 0 and 1 (bus order, as NVML numbers them) are on NUMA node 1.
R=pcie-4gpu; rm -rf "$R/sys"
cpus 2 8 2
node 0 0-7,16-23 263921280
node 1 8-15,24-31 264201660
pci pci0000:00/0000:00:01.1 0x060400 0x1022 0x1483 1
pci pci0000:00/0000:00:01.1/0000:01:00.0 0x030200 0x10de 0x20b5 1
pci pci0000:00/0000:00:03.1 0x060400 0x1022 0x1483 1
pci pci0000:00/0000:00:03.1/0000:02:00.0 0x030200 0x10de 0x20b5 1
pci pci0000:80/0000:80:01.1 0x060400 0x1022 0x1483 0
pci pci0000:80/0000:80:01.1/0000:81:00.0 0x030200 0x10de 0x20b5 0
pci pci0000:80/0000:80:03.1 0x060400 0x1022 0x1483 0
pci pci0000:80/0000:80:03.1/0000:82:00.0 0x020000 0x15b3 0x101d 0
pci pci0000:80/0000:80:03.1/0000:82:00.1 0x020000 0x15b3 0x101d 0
pci pci0000:c0/0000:c0:01.1 0x060400 0x1022 0x1483 0
pci pci0000:c0/0000:c0:01.1/0000:c1:00.0 0x030200 0x10de 0x20b5 0
net ens1f0np0 pci0000:80/0000:80:03.1/0000:82:00.0 100000 up
net ens1f1np1 pci0000:80/0000:80:03.1/0000:82:00.1 -1 down
ib mlx5_0 pci0000:80/0000:80:03.1/0000:82:00.0 "4: ACTIVE" "100 Gb/sec (2X HDR)"
ib mlx5_1 pci0000:80/0000:80:03.1/0000:82:00.1 "1: DOWN" "40 Gb/sec (4X QDR)"
net lo virtual -1 unknown
net docker0 virtual -1 down

# ---- cpu-2s: 2 x Xeon Gold 5222 (4 cores, 2 threads; sparse core IDs),
# no GPU (an ASPEED BMC display), one Intel X710 10GbE port.
R=cpu-2s; rm -rf "$R/sys"
cpus 2 4 2 0 3 9 11
node 0 0-3,8-11 97510204
node 1 4-7,12-15 98304000
pci pci0000:00/0000:00:1c.0 0x060400 0x8086 0xa190 0
pci pci0000:00/0000:00:1c.0/0000:02:00.0 0x060400 0x1a03 0x1150 0
pci pci0000:00/0000:00:1c.0/0000:02:00.0/0000:03:00.0 0x030000 0x1a03 0x2000 0
pci pci0000:17/0000:17:00.0 0x060400 0x8086 0x2030 0
pci pci0000:17/0000:17:00.0/0000:18:00.0 0x020000 0x8086 0x1572 0
net eno1 pci0000:17/0000:17:00.0/0000:18:00.0 10000 up
net lo virtual -1 unknown
