#!/usr/bin/env python3
"""torchrun_table.py - markdown table of bench/torchrun.sh's timecmp.py JSON files.

    torchrun_table.py OUT/torch-1x2.json OUT/torch-2x2.json

One row per file (its --tag: the case, nodes x ranks per node). Cells: median
(min-max) in seconds over completed runs, and the runs that hung or failed;
gorun/torchrun is the median of gorun's per-node launch over torchrun's, with
torchrun's defaults and with --monitor_interval 0.1; gorun - by hand is what
gorun adds to the job started by hand. Python 3 standard library only.
"""
import json
import statistics
import sys

COLUMNS = [("direct", "by hand (no launcher)"), ("gorun", "gorun -np"), ("gorun-pernode", "gorun per-node"),
           ("torchrun", "torchrun"), ("torchrun-mon0.1", "torchrun --monitor_interval 0.1")]


def median(tool):
    times = [r["seconds"] for r in tool["runs"] if r["outcome"] == "ok"]
    return statistics.median(times) if times else None


def cell(tool):
    if tool is None:
        return "-"
    times = [r["seconds"] for r in tool["runs"] if r["outcome"] == "ok"]
    bad = len(tool["runs"]) - len(times)
    if not times:
        return f"all {bad} failed or hung"
    s = f"{statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f})"
    return s + (f", {bad} failed or hung" if bad else "")


def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}"


def main(paths):
    print("| case | " + " | ".join(name for _, name in COLUMNS) + " | gorun/torchrun | gorun/torchrun 0.1 | gorun - by hand |")
    print("|---" * (len(COLUMNS) + 4) + "|")
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        tools = {t["label"]: t for t in d["tools"]}
        g = tools.get("gorun-pernode")
        gm = median(g) if g else None
        direct = tools.get("direct")
        dm = median(direct) if direct else None
        tr, tr01 = tools.get("torchrun"), tools.get("torchrun-mon0.1")
        cells = [cell(tools.get(label)) for label, _ in COLUMNS]
        print(f"| {d['tag']} ({d['runs']} runs) | " + " | ".join(cells) +
              f" | {ratio(gm, median(tr) if tr else None)} | {ratio(gm, median(tr01) if tr01 else None)}"
              f" | {'-' if gm is None or dm is None else f'{gm - dm:+.2f} s'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
