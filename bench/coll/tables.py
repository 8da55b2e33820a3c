#!/usr/bin/env python3
"""tables.py - markdown tables from a bench/coll.sh results folder.

    tables.py [--ranges] [--times] OUT

Reads OUT/raw/CONFIG/PEER-rREP.out (a benchmark's stdout), OUT/limits/*-rREP.csv (the
limits, measured in the same rounds) and OUT/runs.tsv (every run's outcome), and prints
one table per configuration: busbw in GB/s per size, one column per peer, then the
limits at that size. A cell is the median over the rounds (repetitions) of the run's
own value (itself the median of its timed blocks); --ranges adds (min-max) over the
rounds; --times prints time per call in microseconds instead of busbw.

Benchmark output formats read (each line on its own; '#' lines are comments):
  - CSV with a header line naming at least "bytes" and "busbw_GBs" (allreduce.c,
    gloo_allreduce.py; "time_us" and "wrong" are used when present);
  - nccl-tests style rows, blank-separated: size count type redop root time algbw
    busbw #wrong [...] (time in us; the first of the out-of-place/in-place groups).
Standard library only.
"""
import argparse
import csv
import glob
import os
import re
import statistics
import sys

CONFIGS = [
    ("shm-2", "1 host x 2 ranks", 2, 1),
    ("shm-4", "1 host x 4 ranks (4 ranks on 2 vCPUs)", 4, 1),
    ("tcp-2x1", "2 netns hosts x 1 rank (TCP over veth and bridge)", 2, 2),
    ("tcp-4x1", "4 netns hosts x 1 rank (TCP over veth and bridge)", 4, 4),
]
PEERS = [
    ("openmpi", "Open MPI"),
    ("openmpi-noyield", "Open MPI, no yield"),
    ("mpich", "MPICH"),
    ("gloo", "gloo"),
    ("gorun", "gorun"),
]


def human(b):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f and b % f == 0:
            return f"{b // f} {unit}"
    return f"{b} B"


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    if v >= 0.1:
        return f"{v:.2f}"
    if v >= 0.01:
        return f"{v:.3f}"
    return f"{v:.4f}"


def parse_bench(path):
    """{bytes: {"busbw": GB/s, "time_us": us or None, "wrong": int}}, and the comment lines."""
    rows, meta, header = {}, [], None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return rows, meta
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            meta.append(s)
            continue
        if "," in s and "bytes" in s.split(",") and ("busbw_GBs" in s.split(",") or "busbw_gbps" in s.split(",")):
            # allreduce.c's CSV, or gorun bench --csv's (busbw_gbps).
            header = ["busbw_GBs" if h == "busbw_gbps" else h for h in s.split(",")]
            continue
        if header and "," in s:
            f = next(csv.reader([s]))
            if len(f) != len(header):
                continue
            d = dict(zip(header, f))
            try:
                rows[int(d["bytes"])] = {
                    "busbw": float(d["busbw_GBs"]),
                    "time_us": float(d["time_us"]) if "time_us" in d else None,
                    "wrong": int(float(d.get("wrong", "0") or 0)),
                }
            except ValueError:
                pass
            continue
        f = s.split()
        if len(f) >= 9 and f[0].isdigit() and f[1].isdigit():  # nccl-tests style
            try:
                wrong = 0 if f[8] in ("N/A", "-") else int(float(f[8]))
                rows[int(f[0])] = {"busbw": float(f[7]), "time_us": float(f[5]), "wrong": wrong}
            except ValueError:
                pass
    return rows, meta


def read_csv(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(line for line in f if not line.startswith("#")))
    except OSError:
        return []


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def cell(vals, ranges):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = fmt(statistics.median(vals))
    if ranges and len(vals) > 1:
        return f"{m} ({fmt(min(vals))}-{fmt(max(vals))})"
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", action="store_true")
    ap.add_argument("--times", action="store_true")
    ap.add_argument("out")
    a = ap.parse_args()
    out = a.out
    key = "time_us" if a.times else "busbw"

    outcomes = {}
    try:
        for line in open(os.path.join(out, "runs.tsv")):
            f = line.rstrip("\n").split("\t")
            if len(f) >= 3:
                outcomes[f[0]] = (f[1], f[2])
    except OSError:
        pass

    # Limits, per round.
    def per_round(pattern):
        return sorted(glob.glob(os.path.join(out, "limits", pattern)))

    membw = {1: {}, 2: {}}  # threads -> bytes -> [GB/s per round]
    for p in per_round("membw-r*.csv"):
        for r in read_csv(p):
            try:
                t = 1 if int(r["threads"]) == 1 else 2
                membw[t].setdefault(int(r["bytes"]), []).append(float(r["memcpy_GBs"]))
            except (KeyError, ValueError):
                pass
    # TCP exchange: per round and size the better of one socket (PATH-exchange-rR.csv)
    # and one socket per direction (PATH-exchange2-rR.csv, when measured).
    exch = {}  # path -> bytes -> {"GBs": [per round], "time_us": [per round]}
    for path in ("lo", "veth"):
        d = exch.setdefault(path, {})
        for p in per_round(f"{path}-exchange-r*.csv"):
            best = {}
            for q in (p, p.replace(f"{path}-exchange-r", f"{path}-exchange2-r")):
                for r in read_csv(q):
                    try:
                        b, t = int(r["bytes"]), float(r["time_us"])
                    except (KeyError, ValueError):
                        continue
                    if b not in best or t < best[b]:
                        best[b] = t
            for b, t in best.items():
                e = d.setdefault(b, {"GBs": [], "time_us": []})
                e["GBs"].append(b / t / 1e3)
                e["time_us"].append(t)
    stream = {}  # (path, streams) -> [GB/s]
    for path in ("lo", "veth"):
        for n in (1, 2):
            for p in per_round(f"{path}-stream-P{n}-r*.csv"):
                for r in read_csv(p):
                    try:
                        stream.setdefault((path, n), []).append(float(r["GBs"]))
                    except (KeyError, ValueError):
                        pass
    rounds_limits = len(per_round("membw-r*.csv"))

    def stream_note(path, where):
        s1, s2 = stream.get((path, 1)), stream.get((path, 2))
        if not s1 and not s2:
            return ""
        return (f"TCP stream {where}: {fmt(med(s1 or []))} GB/s with 1 connection, "
                f"{fmt(med(s2 or []))} GB/s with 2")

    lat_rows = []
    print(f"busbw, GB/s (GB = 1e9 B; busbw = algbw x 2(n-1)/n); cells: median over rounds"
          f"{' (min-max)' if a.ranges else ''}" if not a.times else
          f"time per call, us; cells: median over rounds{' (min-max)' if a.ranges else ''}")
    for cfg, title, ranks, hosts in CONFIGS:
        data = {}  # peer -> bytes -> [values per round]
        tdata = {}  # the same, time per call in us
        wrong, notes = [], []
        for peer, _ in PEERS:
            files = sorted(glob.glob(os.path.join(out, "raw", cfg, f"{peer}-r*.out")))
            for fpath in files:
                rnd = re.search(r"-r(\d+)\.out$", fpath).group(1)
                rows, meta = parse_bench(fpath)
                oc = outcomes.get(f"{cfg}/{peer}/r{rnd}")
                if oc and oc[0] != "ok":
                    what = {"hang-after-done": "printed every size and '# done', then did not exit: killed",
                            "timeout": "timed out: killed; the sizes it printed count"}.get(oc[0], oc[0])
                    notes.append(f"{peer} round {rnd}: {what} ({oc[1]} s in all)")
                for m in meta:
                    mm = re.match(r"# ranks: (\d+) hosts: (\d+)", m)
                    if mm and (int(mm.group(1)), int(mm.group(2))) != (ranks, hosts):
                        notes.append(f"WARNING {peer} round {rnd}: ran {mm.group(1)} ranks on {mm.group(2)} hosts, "
                                     f"want {ranks} on {hosts}")
                if not rows and files:
                    notes.append(f"{peer} round {rnd}: no results")
                for b, r in rows.items():
                    if r["wrong"]:
                        wrong.append(f"{peer} round {rnd} {human(b)}: {r['wrong']} wrong elements")
                        continue
                    data.setdefault(peer, {}).setdefault(b, []).append(r[key])
                    if r["time_us"] is not None:
                        tdata.setdefault(peer, {}).setdefault(b, []).append(r["time_us"])
        peers = [(p, t) for p, t in PEERS if p in data]
        sizes = sorted({b for p in data.values() for b in p})
        if not sizes:
            continue
        shm = cfg.startswith("shm")
        if a.times:
            limits = ([("TCP lo exchange", lambda b: exch["lo"].get(b, {}).get("time_us"))] if shm else
                      [("TCP veth exchange", lambda b: exch["veth"].get(b, {}).get("time_us"))])
        elif shm:
            limits = [("memcpy 1 thread", lambda b: membw[1].get(b)),
                      ("memcpy 2 threads", lambda b: membw[2].get(b)),
                      ("TCP lo exchange", lambda b: exch["lo"].get(b, {}).get("GBs"))]
        else:
            limits = [("TCP veth exchange", lambda b: exch["veth"].get(b, {}).get("GBs"))]
        print()
        print(f"#### {title}")
        print()
        print("| size | " + " | ".join(t for _, t in peers) + " | " + " | ".join(n for n, _ in limits) + " |")
        print("|---" * (1 + len(peers) + len(limits)) + "|")
        for b in sizes:
            cells = [cell(data[p].get(b, []), a.ranges) for p, _ in peers]
            cells += [cell(f(b) or [], a.ranges) for _, f in limits]
            print(f"| {human(b)} | " + " | ".join(cells) + " |")
        extra = []
        if shm:
            extra.append(stream_note("lo", "over loopback"))
        else:
            extra.append(stream_note("veth", "h1 -> h2"))
        counts = {p: len(glob.glob(os.path.join(out, "raw", cfg, f"{p}-r*.out"))) for p, _ in peers}
        extra.append("rounds: " + ", ".join(f"{t} {counts[p]}" for p, t in peers) + f", limits {rounds_limits}")
        print()
        for e in [e for e in extra if e] + notes + wrong:
            print(f"- {e}")
        small = min(sizes)
        lat_rows.append((title, {p: med(tdata.get(p, {}).get(small, [])) for p, _ in peers},
                         med(exch["lo" if shm else "veth"].get(small, {}).get("time_us", [])), small))

    if not a.times and lat_rows:
        # Time per call at the smallest size: latency, hard to read from busbw.
        print()
        small = lat_rows[0][3]
        print(f"#### Time per call at {human(small)}, us (median over rounds)")
        print()
        peers = [(p, t) for p, t in PEERS if any(p in r[1] for r in lat_rows)]
        print("| configuration | " + " | ".join(t for _, t in peers) + " | TCP exchange, same path |")
        print("|---" * (2 + len(peers)) + "|")
        for title, vals, ex, b in lat_rows:
            cells = [fmt(vals.get(p)) for p, _ in peers]
            print(f"| {title} | " + " | ".join(cells) + f" | {fmt(ex)} |")
        e8 = {path: med(exch[path].get(8, {}).get("time_us", [])) for path in ("lo", "veth")}
        parts = [f"{name} {fmt(e8[path])} us" for path, name in (("lo", "loopback"), ("veth", "veth h1 <-> h2")) if e8[path]]
        if parts:
            print()
            print("- TCP exchange of 8 B (one round of tcpbw): " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
