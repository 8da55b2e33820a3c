#!/usr/bin/env python3
"""table.py - the tables of bench/spawnfloor.sh from its raw runs.

    table.py RAW.tsv

RAW.tsv has one line per timed run: round, variant, N, spawn_ms, total_ms
(spawn: all N started; total: all N started and reaped, from the same start),
self_cpu_ms, children_cpu_ms (user+system CPU of the spawning process over
that time, and of its reaped children). Prints markdown: per variant and N
the median spawn and spawn+reap times in ms; per N the best C and the best Go
variant (lowest median) and Go's best over C's best, for spawn and for
spawn+reap; and at the largest N each variant's CPU, against the wall time
that CPU takes on this machine's CPUs (its sum over os.cpu_count()).
"""
import os
import statistics
import sys
from collections import defaultdict


def load(path):
    runs = defaultdict(list)  # (variant, n) -> [(spawn, total, self cpu, children cpu)]
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 7:
                continue
            runs[(parts[1], int(parts[2]))].append(tuple(float(x) for x in parts[3:]))
    return runs


METHODS = ["spawn", "usevfork", "vfork", "fork", "cmd", "startprocess", "forkexec"]


def sort_key(variant):
    """C before Go, then by method, then by threads or goroutines."""
    parts = variant.split("-")
    lang, meth, par = parts[0], parts[1], 1
    if len(parts) > 2 and parts[2][1:].isdigit():
        par = int(parts[2][1:])
    return (lang != "c", METHODS.index(meth) if meth in METHODS else len(METHODS), meth, par)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: table.py RAW.tsv")
    runs = load(sys.argv[1])
    if not runs:
        sys.exit("table.py: no runs in " + sys.argv[1])
    variants = sorted({v for v, _ in runs}, key=sort_key)
    ns = sorted({n for _, n in runs})
    med = {}
    for key, rs in runs.items():
        med[key] = tuple(statistics.median(r[i] for r in rs) for i in range(4)) + (len(rs),)

    counts = sorted({m[-1] for m in med.values()})
    print("Median ms to start all N (spawn) / to start and reap all N (+reap); runs per cell: %s"
          % ", ".join(map(str, counts)))
    print()
    print("| variant | " + " | ".join("N=%d spawn / +reap" % n for n in ns) + " |")
    print("|---|" + "---|" * len(ns))
    for v in variants:
        cells = []
        for n in ns:
            m = med.get((v, n))
            cells.append("%.2f / %.2f" % m[:2] if m else "-")
        print("| %s | %s |" % (v, " | ".join(cells)))

    print()
    print("| N | best C, spawn | best Go, spawn | Go / C | best C, +reap | best Go, +reap | Go / C |")
    print("|---|---|---|---|---|---|---|")
    for n in ns:
        row = ["%d" % n]
        for col in (0, 1):
            best = {}
            for lang in ("c-", "go-"):
                cands = [(med[(v, n)][col], v) for v in variants if v.startswith(lang) and (v, n) in med]
                best[lang] = min(cands) if cands else None
            c, g = best["c-"], best["go-"]
            row += ["%.2f (%s)" % c if c else "-", "%.2f (%s)" % g if g else "-",
                    "%.2f" % (g[0] / c[0]) if c and g and c[0] > 0 else "-"]
        print("| " + " | ".join(row) + " |")
    cpu_table(med, variants, ns[-1])


def cpu_table(med, variants, n):
    """At N=n: where the CPU goes, and the wall time it needs at the least."""
    cpus = os.cpu_count() or 1
    print()
    print("CPU at N=%d (ms, medians; the CPU floor is (parent + children) / %d CPUs)" % (n, cpus))
    print()
    print("| variant | spawn+reap | parent CPU | children CPU | children CPU per process | CPU floor |")
    print("|---|---|---|---|---|---|")
    for v in variants:
        m = med.get((v, n))
        if m:
            _, total, par, kids, _ = m
            print("| %s | %.2f | %.2f | %.2f | %.3f | %.2f |" % (v, total, par, kids, kids / n, (par + kids) / cpus))


if __name__ == "__main__":
    main()
