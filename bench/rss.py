#!/usr/bin/env python3
"""rss.py - peak memory and launch phases of gorun, from its --summary-json.

    rss.py --gorun BIN [--np 64] [--runs 10] [--timeout 10] [--time /usr/bin/time] [--json FILE]

Runs `BIN -np NP --summary-json F /bin/true` RUNS times (after one warm-up) and
collects, per run:
  head_max_rss_kb       the head's own peak RSS (getrusage RUSAGE_SELF), KiB
  agents[].max_rss_kb   each agent's own peak RSS, KiB
  phases                agents_up_ns, ranks_started_ns, all_exited_ns (from the head's start)
  wall                  outside wall time of the whole command
  time_M                with --time (GNU time): `%M` of the gorun process, KiB. wait4's
                        rusage folds in the peak of every child the process reaped, so this
                        is max(head, agent, ranks): the whole tree's largest process.
Prints a markdown table (median and max over runs) and writes the raw records.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from timecmp import RSS_SHIM, run_once  # same runner: exact wait, per-run timeout, tree kill


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gorun", required=True)
    ap.add_argument("--np", type=int, default=64)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--time", default="", help="GNU time binary; empty = skip %%M")
    ap.add_argument("--json")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GORUN_")}
    recs = []
    with tempfile.TemporaryDirectory(prefix="gorun-rss-") as tmp:
        sj, tf = os.path.join(tmp, "summary.json"), os.path.join(tmp, "time.txt")
        for i in range(a.runs + 1):
            for f in (sj, tf):
                if os.path.exists(f):
                    os.unlink(f)
            argv = [a.gorun, "-np", str(a.np), "--summary-json", sj, "/bin/true"]
            if a.time:
                argv = [a.time, "-f", "%M", "-o", tf] + argv
            else:
                # Not straight from Python: gorun's ru_maxrss would start at Python's
                # peak (Linux keeps it over fork+exec); GNU time, or a forking sh, is small.
                argv = RSS_SHIM + argv
            wall, outcome = run_once(argv, a.timeout, env, cwd=tmp)
            if outcome == "hang":
                recs.append({"run": i, "outcome": "hang"})
                continue
            if i == 0:
                continue  # warm-up
            r = {"run": i, "outcome": outcome, "wall_s": wall}
            try:
                s = json.load(open(sj))
                r["head_max_rss_kb"] = s["head_max_rss_kb"]
                r["agent_max_rss_kb"] = [x["max_rss_kb"] for x in s["agents"]]
                r["phases_ns"] = s["phases"]
                r["ranks"] = len(s["ranks"])
            except (OSError, ValueError, KeyError) as e:
                r["summary_error"] = str(e)
            if a.time:
                try:
                    r["time_M_kb"] = int(open(tf).read().split()[-1])
                except (OSError, ValueError, IndexError) as e:
                    r["time_error"] = str(e)
            recs.append(r)

    good = [r for r in recs if "phases_ns" in r]
    rows = []

    def row(name, vals, unit, scale=1.0, fmt="{:.0f}"):
        if vals:
            rows.append((name, fmt.format(statistics.median(vals) / scale),
                         fmt.format(min(vals) / scale), fmt.format(max(vals) / scale), unit))

    row("head max RSS (summary head_max_rss_kb)", [r["head_max_rss_kb"] for r in good], "MiB", 1024, "{:.1f}")
    row("agent max RSS (summary agents[].max_rss_kb)", [max(r["agent_max_rss_kb"]) for r in good], "MiB", 1024, "{:.1f}")
    row("whole tree peak (GNU time %M of gorun)", [r["time_M_kb"] for r in good if "time_M_kb" in r], "MiB", 1024, "{:.1f}")
    ph = [r["phases_ns"] for r in good]
    row("agents up (agents_up_ns)", [p["agents_up_ns"] for p in ph], "ms", 1e6, "{:.1f}")
    row("start all ranks: fork+exec loop (ranks_started - agents_up)",
        [p["ranks_started_ns"] - p["agents_up_ns"] for p in ph], "ms", 1e6, "{:.1f}")
    row("reap + report exits + agent end-of-job checks (all_exited - ranks_started)",
        [p["all_exited_ns"] - p["ranks_started_ns"] for p in ph], "ms", 1e6, "{:.1f}")
    row("outside the phases (wall - all_exited: head exec+Go init+CLI, agent shutdown, exits)",
        [r["wall_s"] * 1e9 - r["phases_ns"]["all_exited_ns"] for r in good], "ms", 1e6, "{:.1f}")
    row("wall time of the run (under GNU time when present)", [r["wall_s"] for r in good], "ms", 1e-3, "{:.1f}")
    bad = [r for r in recs if r.get("outcome") != "ok"]
    print(f"gorun -np {a.np} /bin/true: {len(good)} runs with a summary; {len(bad)} hung or failed\n")
    print("| measure | median | min | max | unit |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"np": a.np, "runs": recs}, f, indent=1)
    return 0 if good and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
