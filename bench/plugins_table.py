#!/usr/bin/env python3
"""plugins_table.py - markdown tables of bench/plugins.sh's runs.

    plugins_table.py OUT REPS VARIANT...      (the first variant is the reference: builtin)

Reads OUT/raw/VARIANT-rROUND.csv (gorun bench --csv: bytes, time_us, busbw_gbps, wrong)
and .json (the transport in its header) for ROUND 1..REPS. Per size: the median over the rounds of each
variant's busbw, each other variant's median over the reference's, the range over the
rounds; then the time per call at the smallest size, wrong elements, and per plugin
whether it is within 10% of the reference (ratio >= 0.90) at every size from 1 MiB.
Standard library only.
"""
import csv
import json
import os
import statistics
import sys

TARGET = 0.90
TARGET_FROM = 1 << 20


def fmt_size(b):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def num(x):
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def load(out, reps, variant):
    """{bytes: [(busbw, time_us, wrong), ...]} over the rounds that printed that size."""
    rows = {}
    for r in range(1, reps + 1):
        path = os.path.join(out, "raw", f"{variant}-r{r}.csv")
        try:
            with open(path) as f:
                lines = [ln for ln in f if ln.strip() and not ln.startswith("#")]
        except OSError:
            continue
        for row in csv.DictReader(lines):
            try:
                rows.setdefault(int(row["bytes"]), []).append(
                    (float(row["busbw_gbps"]), float(row["time_us"]), int(row.get("wrong") or 0)))
            except (KeyError, ValueError, TypeError):
                pass
    return rows


def main():
    out, reps, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ref, plugins = variants[0], variants[1:]
    data = {v: load(out, reps, v) for v in variants}
    sizes = sorted({b for d in data.values() for b in d})
    if not sizes:
        print("No results: every run failed (see the raw outputs).")
        return

    def med(v, b, i=0):
        vals = [x[i] for x in data[v].get(b, [])]
        return statistics.median(vals) if vals else None

    def cell(v, b, i=0):
        m, n = med(v, b, i), len(data[v].get(b, []))
        if m is None:
            return "-"
        return num(m) + ("" if n == reps else f" ({n} of {reps})")

    def ratio(v, b):
        m, r = med(v, b), med(ref, b)
        return None if m is None or not r else m / r

    print(f"allreduce float32 sum, 2 netns hosts x 1 rank; busbw GB/s, median of {reps} rounds\n")
    head = [f"{v}" for v in variants] + [f"{p} / {ref}" for p in plugins]
    print("| size | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for b in sizes:
        rs = [ratio(p, b) for p in plugins]
        print(f"| {fmt_size(b)} | " + " | ".join(cell(v, b) for v in variants) + " | "
              + " | ".join("-" if x is None else f"{x:.2f}" for x in rs) + " |")

    small = sizes[0]
    print(f"\nTime per call at {fmt_size(small)}, us, median (min-max) over the rounds: " + "; ".join(
        f"{v} {num(med(v, small, 1))} ({num(min(x[1] for x in data[v][small]))}-"
        f"{num(max(x[1] for x in data[v][small]))})" if data[v].get(small) else f"{v} -"
        for v in variants) + ".")

    print("\nbusbw range over the rounds, GB/s (min-max):\n")
    print("| size | " + " | ".join(variants) + " |")
    print("|---" * (len(variants) + 1) + "|")
    for b in sizes:
        print(f"| {fmt_size(b)} | " + " | ".join(
            f"{num(min(x[0] for x in data[v][b]))}-{num(max(x[0] for x in data[v][b]))}"
            if data[v].get(b) else "-" for v in variants) + " |")

    # The transport each run reported (OUT/raw/VARIANT-rR.json): "tcp" for the reference,
    # the plugin's name for the others (a variant NAME-SUFFIX runs plugin NAME another way).
    seen = {}
    for v in variants:
        for r in range(1, reps + 1):
            try:
                with open(os.path.join(out, "raw", f"{v}-r{r}.json")) as f:
                    seen.setdefault(v, set()).add(json.load(f)["header"].get("transport", "?"))
            except (OSError, ValueError, KeyError):
                pass
    print("\nTransport reported by gorun bench: " + ", ".join(
        f"{v} {'/'.join(sorted(seen[v])) if v in seen else '-'}" for v in variants) + ".")
    for v in variants:
        want = "tcp" if v == ref else v.split("-")[0]
        if v in seen and seen[v] != {want}:
            print(f"WARNING: {v}'s runs report transport {'/'.join(sorted(seen[v]))}, not {want}.")

    wrong = {v: sum(x[2] for d in data[v].values() for x in d) for v in variants}
    print("\nWrong elements: " + ", ".join(f"{v} {w}" for v, w in wrong.items()) + ".")

    print(f"\nTarget: within 10% of {ref} (ratio >= {TARGET:.2f}) at every size >= {fmt_size(TARGET_FROM)}:\n")
    big = [b for b in sizes if b >= TARGET_FROM]
    if not plugins:
        print("- no plugin variant was measured")
    for p in plugins:
        rs = [(b, ratio(p, b)) for b in big]
        missing = [b for b, x in rs if x is None]
        low = [b for b, x in rs if x is not None and x < TARGET]
        met = bool(rs) and not missing and not low
        detail = ", ".join(f"{fmt_size(b)} {'-' if x is None else f'{x:.2f}'}" for b, x in rs)
        why = ""
        if not met:
            why = " (" + "; ".join(filter(None, [
                f"below at {', '.join(fmt_size(b) for b in low)}" if low else "",
                f"no result at {', '.join(fmt_size(b) for b in missing)}" if missing else "",
                "no size >= 1 MiB measured" if not rs else ""])) + ")"
        print(f"- {p}: target {'MET' if met else 'NOT met'}{why}" + (f": {detail}" if detail else ""))


if __name__ == "__main__":
    main()
