#!/usr/bin/env bash
# Writes the hand-built sysfs fixtures of topology's tests (dgx-h100,
# pcie-4gpu, cpu-2s, mi300x, intel-max): only the files the code reads,
# laid out as Linux lays them out (real directories under sys/devices,
# symbolic links in sys/bus/pci/devices, sys/class/net and
# sys/class/infiniband). Run from this directory; it replaces those five
# trees. The NVML side of each machine is its nvml.json, written by hand
# (mi300x and intel-max have none: they are not NVIDIA machines).
#
# Where a section says "documented", the value was read from the public
# source it cites; "guessed" marks values chosen to be plausible where no
# public source was found (bus numbers of devices the sources do not
# show, bridge device IDs, memory sizes, interface names).
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
# When LINK is set ("SPEED/WIDTH", e.g. "32.0 GT/s PCIe/16") the device
# also gets max_link_speed and max_link_width.
LINK=
pci() {
  local bdf=${1##*/} d=sys/devices/$1
  put $d/class "$2"; put $d/vendor "$3"; put $d/device "$4"; put $d/numa_node "$5"
  if [ -n "$LINK" ]; then put $d/max_link_speed "${LINK%/*}"; put $d/max_link_width "${LINK##*/}"; fi
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
# PCIe links: H100 SXM5, ConnectX-7 and Sapphire Rapids root ports are
# PCIe Gen5 (documented: NVIDIA's H100 and ConnectX-7 product briefs,
# Intel's 4th-gen Xeon brief); x16 everywhere, and the PEX890xx switch
# ports at Gen5 x16, guessed.
LINK="32.0 GT/s PCIe/16"
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
LINK=

# ---- pcie-4gpu: 2 x EPYC 72F3 (8 cores, 2 threads), NPS1, 4 A100 PCIe
# without NVLink bridges, one dual-port ConnectX-6 Dx (RoCE). The
# firmware gives socket 1's root complexes the low bus numbers, so GPUs
# 0 and 1 (bus order, as NVML numbers them) are on NUMA node 1.
R=pcie-4gpu; rm -rf "$R/sys"
# PCIe links: A100 PCIe, ConnectX-6 Dx and EPYC 7003 root ports are PCIe
# Gen4 (documented: the product briefs); x16, guessed.
LINK="16.0 GT/s PCIe/16"
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
LINK=

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

# ---- mi300x: an AMD Instinct MI300X 8-GPU node (UBB 2.0 baseboard, 8 OAM
# GPUs) on 2 x EPYC 9654 (Genoa, 96 cores, 2 threads), NPS1 so 2 NUMA
# nodes. Each GPU sits behind a PCIe Gen5 switch (Broadcom PEX890xx
# assumed) under its own root complex, and the same switch carries one
# ConnectX-7 400G NIC (RoCE, Ethernet mode); GPUs and NICs 0-3 on socket
# 0, 4-7 on socket 1. One
# frontend Ethernet port and the BMC's ASPEED VGA (not a GPU) complete it.
# A GPU is class 0x120000 (processing accelerator), not a display class.
#
# Sources:
# - GPU and NIC PCI paths, NIC names and the frontend port (documented):
#   AMD's "Mapping NIC to GPU NUMA Node" guide, ROCm/system-acceptance-docs
#   docs/network/topology-mapping.md: `lspci -d 1002:74a1 -PP` and
#   `lspci -d 15b3:1021 -PP` outputs of its example 2-socket EPYC
#   system, the GPU/CPU/NIC adjacency table (GPUs 0-3 on CPU 0, 4-7 on
#   CPU 1) and the
#   /sys/class/net/*/device listing (enp9s0np0 ... enp241s0np0, plus
#   ens99f0np0 -> 0000:b9:00.0). The guide does not name the chassis.
# - 1002:74a1 = "Aqua Vanjaram [Instinct MI300X]" and class 0x1200: same
#   guide and ROCm/system-acceptance-docs docs/gpus/mi300x.md ("lspci |
#   grep MI300X" prints "Processing accelerators: ... [Instinct MI300X]",
#   PCI base class 0x12 subclass 0x00); a public `lspci -nnk` of an
#   MI300X host in an AMD GIM/vfio-pci guide prints "Processing
#   accelerators [1200]: ... [Instinct MI300X] [1002:74a1]" (found by
#   code search, repository not recorded), and apache/cloudstack issue
#   11701 shows MI325X (74a5) as "Processing accelerators [1200]" too.
#   Not 0x038000: that is what older Instinct boards present (MI50, MI100:
#   "Display controller [0380]" in public lspci -nn outputs).
# - Root ports xx:01.1 = 1022:14ab (Genoa GPP bridge) behind which sit
#   Broadcom PEX890xx switches 1000:c030: public lspci of Genoa GPU
#   servers ("c0:01.1 PCI bridge: AMD Device 14ab", "c1:00.0 PCI bridge:
#   Broadcom / LSI PEX890xx PCIe Gen 5 Switch"); c030 is in pci.ids. That
#   this MI300X system's switches are PEX890xx is assumed, not documented.
# - BMC VGA on a Genoa board: root port 60:05.2 -> AST1150 bridge
#   1a03:1150 (bus 74) -> ASPEED Graphics 1a03:2000 (bus 75), copied from
#   the `lspci -tv` of an ASUS ESC8000A-E12 (2 x Genoa) in
#   luigifcruz/stelline docs/quickstart/validated-hardware/server/
#   asus-esc8000a-e12.md; its placement on this machine is guessed.
#
# Guessed: the CPU model (the guide names none; its xx:01.1 root ports in
# 8 root complexes are EPYC 9004 (Genoa) style, and 9654 is a Genoa part),
# contiguous core IDs 0-95, MemTotal (12 x 64 GB DDR5 per socket, less
# firmware reservations), the two bridges between each switch port and its
# GPU (the guide shows two PCI bridges, e.g. 03:00.0 and 04:00.0 above GPU
# 05:00.0, without IDs; written here as the GPU's own upstream/downstream
# switch ports 1002:14a0/14a1, the IDs AMD Instinct MI100 boards show),
# the frontend card (a Broadcom BCM57508 14e4:1750, 100 GbE) and its root
# port 98:03.1, the mlx5_N names (bus order), link speeds and IB rates.
R=mi300x; rm -rf "$R/sys"
cpus 2 96 2
node 0 0-95,192-287 792409020
node 1 96-191,288-383 792649848
i=0
# root complex, switch upstream bus, GPU's switch port (bus:dev), the two
# bridges' buses, GPU bus, NIC's switch port (bus:dev), NIC bus; one line
# per GPU, in the guide's order.
while read -r rc usp gdsp b1 b2 gpu ndsp nic; do
  numa=$((i / 4))
  rp=pci0000:$rc/0000:$rc:01.1
  up=$rp/0000:$usp:00.0
  pci $rp 0x060400 0x1022 0x14ab $numa
  pci $up 0x060400 0x1000 0xc030 $numa
  pci $up/0000:$gdsp.0 0x060400 0x1000 0xc030 $numa
  pci $up/0000:$ndsp.0 0x060400 0x1000 0xc030 $numa
  gb=$up/0000:$gdsp.0/0000:$b1:00.0
  pci $gb 0x060400 0x1002 0x14a0 $numa
  pci $gb/0000:$b2:00.0 0x060400 0x1002 0x14a1 $numa
  pci $gb/0000:$b2:00.0/0000:$gpu:00.0 0x120000 0x1002 0x74a1 $numa
  nicp=$up/0000:$ndsp.0/0000:$nic:00.0
  pci $nicp 0x020000 0x15b3 0x1021 $numa
  net enp$((16#$nic))s0np0 $nicp 400000 up
  ib mlx5_$i $nicp "4: ACTIVE" "400 Gb/sec (4X NDR)"
  i=$((i + 1))
done <<'GPUS'
00 01 02:00 03 04 05 02:01 09
18 19 1a:04 29 2a 2b 1a:03 23
48 49 4a:04 59 5a 5b 4a:03 53
60 61 62:00 63 64 65 62:01 69
78 79 7a:00 7b 7c 7d 7a:05 8f
98 99 9a:03 a3 a4 a5 9a:01 9c
c8 c9 ca:03 d3 d4 d5 ca:02 cd
e0 e1 e2:02 e5 e6 e7 e2:04 f1
GPUS
pci pci0000:98/0000:98:03.1 0x060400 0x1022 0x14ab 1
pci pci0000:98/0000:98:03.1/0000:b9:00.0 0x020000 0x14e4 0x1750 1
net ens99f0np0 pci0000:98/0000:98:03.1/0000:b9:00.0 100000 up
pci pci0000:60/0000:60:05.2 0x060400 0x1022 0x14ab 0
pci pci0000:60/0000:60:05.2/0000:74:00.0 0x060400 0x1a03 0x1150 0
pci pci0000:60/0000:60:05.2/0000:74:00.0/0000:75:00.0 0x030000 0x1a03 0x2000 0
net lo virtual -1 unknown

# ---- intel-max: an Aurora (ALCF) compute node, HPE Cray EX: 2 x Xeon
# CPU Max 9470C (Sapphire Rapids with HBM, 52 cores, 2 threads), HBM in
# flat mode, so 4 NUMA nodes: 0 and 1 hold each socket's CPUs and 512 GB
# DDR5, 2 and 3 hold each socket's 64 GB HBM and no CPU (empty cpulist).
# 6 Data Center GPU Max 1550 (Ponte Vecchio, class 0x038000, display
# controller), 3 per socket, and 8 HPE Slingshot-11 (Cassini, 17db:0501)
# NICs, 4 per socket, plain Ethernet netdevs hsn0-hsn7 (no
# sys/class/infiniband). Each socket is its own PCI domain (0000, 0001),
# so both sockets' GPUs have the same bus numbers. No VGA device: no
# public source shows one on these blades, so none is written.
#
# Sources:
# - CPUs, NUMA nodes, memory (documented): argonne-lcf/user-guides
#   docs/aurora/running-jobs-aurora.md, "Using the HBM on the Sapphire
#   Rapids CPUs": `numactl -H` of an Aurora node: node 0 cpus 0-51,104-155
#   515524 MB, node 1 cpus 52-103,156-207 514994 MB, nodes 2 and 3 no cpus
#   65536 MB; "logical processors i and i+104 share a physical core";
#   docs/aurora/hardware-overview/machine-overview.md (9470C, 52 cores x 2
#   threads, 64 GB HBM and 512 GB DDR5 per CPU, 6 GPUs, 8 Slingshot-11
#   NICs). MemTotal here = those MB x 1024.
# - GPU bus IDs and socket (documented): docs/aurora/performance-tools/
#   xpu-smi.md, `xpu-smi discovery` on an Aurora node: 0000:18:00.0,
#   0000:42:00.0, 0000:6c:00.0, 0001:18:00.0, 0001:42:00.0, 0001:6c:00.0;
#   running-jobs-aurora.md: 3 GPUs per socket, GPUs 0-2 bound with CPUs
#   1-48, 3-5 with 53-100.
# - Class 0x0380 and ID 0x0bd5: kata-containers docs/use-cases/
#   Intel-Discrete-GPU-passthrough-and-Kata.md (`lspci -nn -D` of Max
#   GPUs: "Display controller [0380]: Intel Corporation ... [8086:0bd5]");
#   intel/compute-runtime's device list names both 0x0BD5 and 0x0BD6
#   "Intel(R) Data Center GPU Max 1550"; which of the two Aurora's OAM
#   modules report is not documented (0x0bd5 written).
# - Cassini 1 = 17db:0501 (HPE shs-cxi-driver, rdma-core cxi provider).
#
# Guessed: the root complexes (each GPU is 3 buses below a Sapphire Rapids
# stack at 0x15, 0x3f, 0x69, 0x2a apart, which the documented GPU buses
# fit), the two bridges between root port and GPU (Ponte Vecchio's own
# switch ports; their IDs are not documented, DG2's 8086:4fa1/4fa4 are
# written), the root port ID 8086:352a (as in dgx-h100), contiguous core
# IDs, every NIC's PCI address, root port and class (0x020000), which
# hsnN is on which socket (hsn0-3 socket 0, bus order), and NIC speeds.
R=intel-max; rm -rf "$R/sys"
cpus 2 52 2
node 0 0-51,104-155 527896576
node 1 52-103,156-207 527353856
node 2 "" 67108864
node 3 "" 67108864
n=0
for s in 0 1; do
  dom=000$s
  for rc in 15 3f 69; do
    u=$(printf %02x $((16#$rc + 1)))
    d=$(printf %02x $((16#$rc + 2)))
    g=$(printf %02x $((16#$rc + 3)))
    rp=pci$dom:$rc/$dom:$rc:01.0
    pci $rp 0x060400 0x8086 0x352a $s
    pci $rp/$dom:$u:00.0 0x060400 0x8086 0x4fa1 $s
    pci $rp/$dom:$u:00.0/$dom:$d:01.0 0x060400 0x8086 0x4fa4 $s
    pci $rp/$dom:$u:00.0/$dom:$d:01.0/$dom:$g:00.0 0x038000 0x8086 0x0bd5 $s
  done
  for p in 93:01.0:94 93:03.0:95 bd:01.0:be bd:03.0:bf; do
    IFS=: read -r rc port bus <<<"$p"
    rp=pci$dom:$rc/$dom:$rc:$port
    pci $rp 0x060400 0x8086 0x352a $s
    pci $rp/$dom:$bus:00.0 0x020000 0x17db 0x0501 $s
    net hsn$n $rp/$dom:$bus:00.0 200000 up
    n=$((n + 1))
  done
done
net lo virtual -1 unknown
