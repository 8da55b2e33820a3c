#!/usr/bin/env python3
"""table.py - markdown launch-time table from timecmp.py's JSON files.

    table.py DIR/launch-np*.json

One row per K. Cells: median (min-max) in ms over completed runs; gorun/peer is
gorun's median over the faster peer's median; hangs are runs killed at the timeout.
"""
import json
import re
import sys


def ms(x):
    return "-" if x is None else f"{x * 1e3:.0f}"


def cell(t):
    if t is None:
        return "n/a"
    if t["median"] is None:
        return "no run completed"
    return f"{ms(t['median'])} ({ms(t['min'])}-{ms(t['max'])})"


def main(paths):
    rows = []
    for p in paths:
        d = json.load(open(p))
        k = int(re.search(r"np(\d+)", p).group(1))
        rows.append((k, {t["label"]: t for t in d["tools"]}, d))
    rows.sort(key=lambda r: r[0])
    labels = ["gorun", "openmpi", "mpich"]
    print("| K | gorun ms | Open MPI mpirun ms | MPICH hydra ms | gorun / faster peer | hangs gorun / ompi / mpich | failures | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for k, t, d in rows:
        peers = [t[l] for l in ("openmpi", "mpich") if l in t and t[l]["median"] is not None]
        g = t.get("gorun")
        ratio = "-"
        if g and g["median"] is not None and peers:
            best = min(peers, key=lambda x: x["median"])
            ratio = f"{g['median'] / best['median']:.2f} (vs {best['label']})"
        hangs = " / ".join(str(t[l]["hangs"]) if l in t else "-" for l in labels)
        fails = " / ".join(str(t[l]["failures"]) if l in t else "-" for l in labels)
        print(f"| {k} | {cell(g)} | {cell(t.get('openmpi'))} | {cell(t.get('mpich'))} | {ratio} | {hangs} | {fails} | {d['runs']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
