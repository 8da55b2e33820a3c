#!/usr/bin/env python3
"""table.py - markdown launch-time table from timecmp.py's JSON files.

    table.py DIR/launch-np*.json        (with a "before" column when launch.sh ran BEFORE)
    table.py --by-tag FILE.json ...     one row per file, named by its --tag (ssh.sh)
    table.py --by-tag-kex FILE.json ... the same against the peers' "-kex" run (ssh.sh)
    table.py --phases FILE.json ...     gorun only: wall time, --summary-json phases, RSS
    table.py --pair FILE.json ...       gorun against one peer per file, named by its --tag (mpi.sh)
    table.py --jobs DIR/jobs-np*.json   gorun against gorun --jobs-dir off (launch.sh)

One row per K. Cells: median (min-max) in ms over completed runs; gorun/peer is
gorun's median over the faster peer's median; hangs are runs killed at the timeout.
--by-tag adds gorun's ratio to each peer, the command labelled "before" (ssh.sh's
BEFORE) with gorun's ratio to it if there is one, the command labelled "gorun-no-stage" if
any, and the one labelled "ssh" (a plain ssh round trip to each host: the floor). --phases makes one row per
command (label) of every file: medians over the runs that left a summary (connected_ns
is "-" for a gorun that does not record it). --pair makes one row per file: gorun and
the file's other command (the peer), gorun's median over the peer's.
"""
import json
import re
import statistics
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
    before = any("before" in t for _, t, _ in rows)  # launch.sh's BEFORE: an earlier build
    head = "| K | gorun ms |" + (" before ms | gorun / before |" if before else "")
    print(head + " Open MPI mpirun ms | MPICH hydra ms | gorun / faster peer | hangs gorun / ompi / mpich | failures | runs |")
    print("|---" * (head.count("|") - 1) + "|---|---|---|---|---|---|")
    for k, t, d in rows:
        peers = [t[l] for l in ("openmpi", "mpich") if l in t and t[l]["median"] is not None]
        g = t.get("gorun")
        ratio_ = "-"
        if g and g["median"] is not None and peers:
            best = min(peers, key=lambda x: x["median"])
            ratio_ = f"{g['median'] / best['median']:.2f} (vs {best['label']})"
        hangs = " / ".join(str(t[l]["hangs"]) if l in t else "-" for l in labels)
        fails = " / ".join(str(t[l]["failures"]) if l in t else "-" for l in labels)
        b = f" {cell(t.get('before'))} | {ratio(g, t.get('before'))} |" if before else ""
        print(f"| {k} | {cell(g)} |{b} {cell(t.get('openmpi'))} | {cell(t.get('mpich'))} | {ratio_} | {hangs} | {fails} | {d['runs']} |")


def jobs(paths):
    """The job socket's cost: gorun against gorun --jobs-dir off, one row per K."""
    rows = []
    for p in paths:
        d = json.load(open(p))
        k = int(re.search(r"np(\d+)", p).group(1))
        rows.append((k, {t["label"]: t for t in d["tools"]}))
    rows.sort(key=lambda r: r[0])
    print("| K | gorun ms (job socket and file) | gorun --jobs-dir off ms | ratio |")
    print("|---|---|---|---|")
    for k, t in rows:
        print(f"| {k} | {cell(t.get('gorun'))} | {cell(t.get('gorun-nojobs'))} | {ratio(t.get('gorun'), t.get('gorun-nojobs'))} |")


def ratio(g, p):
    if not g or not p or g["median"] is None or p["median"] is None:
        return "-"
    return f"{g['median'] / p['median']:.2f}"


def by_tag(paths, suffix=""):
    """One row per file (case = its tag): the three tools, ratios, the ssh floor.

    With suffix (such as "-kex"), the peers and the floor are the commands labelled
    openmpi+suffix, mpich+suffix and ssh+suffix; files without them are skipped."""
    labels = ["gorun", "openmpi" + suffix, "mpich" + suffix]
    rows = []
    any_ns = any(x["label"] == "gorun-no-stage" for p in paths for x in json.load(open(p))["tools"])
    any_bf = any(x["label"] == "before" for p in paths for x in json.load(open(p))["tools"])
    for p in paths:
        d = json.load(open(p))
        t = {x["label"]: x for x in d["tools"]}
        if suffix and labels[1] not in t and labels[2] not in t:
            continue
        g = t.get("gorun")
        o, m = t.get(labels[1]), t.get(labels[2])
        hangs = " / ".join(str(t[l]["hangs"]) if l in t else "-" for l in labels)
        fails = " / ".join(str(t[l]["failures"]) if l in t else "-" for l in labels)
        ns = t.get("gorun-no-stage")
        extra = f" {cell(ns)} ({ratio(ns, m)}) |" if any_ns else ""
        if any_bf:
            extra += f" {cell(t.get('before'))} ({ratio(g, t.get('before'))}) |"
        rows.append(f"| {d['tag']} | {cell(g)} | {cell(o)} | {cell(m)} | "
                    f"{ratio(g, o)} | {ratio(g, m)} |{extra} {cell(t.get('ssh' + suffix))} | {hangs} | {fails} | {d['runs']} |")
    if not rows:
        return False
    head = "| case | gorun ms | Open MPI mpirun ms | MPICH hydra ms | gorun / Open MPI | gorun / MPICH |"
    if any_ns:
        head += " gorun --no-stage ms (/ MPICH) |"
    if any_bf:
        head += " before ms (gorun / before) |"
    print(head + " ssh floor ms | hangs gorun / ompi / mpich | failures | runs |")
    print("|---" * head.count("|") + "|---|---|---|")
    print("\n".join(rows))
    return True


PEER_NAMES = {"mpich": "MPICH mpiexec.hydra", "openmpi": "Open MPI mpirun",
              "gorun-setsid": "gorun, each rank under setsid -w"}


def pair(paths):
    """One row per file (case = its tag): gorun, the other command, the ratio."""
    print("| case | gorun ms | peer | peer ms | gorun / peer | hangs gorun / peer | failures gorun / peer | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for p in paths:
        d = json.load(open(p))
        g = next((x for x in d["tools"] if x["label"] == "gorun"), None)
        for o in (x for x in d["tools"] if x["label"] != "gorun"):
            hangs = f"{g['hangs'] if g else '-'} / {o['hangs']}"
            fails = f"{g['failures'] if g else '-'} / {o['failures']}"
            print(f"| {d['tag']} | {cell(g)} | {PEER_NAMES.get(o['label'], o['label'])} | {cell(o)} | "
                  f"{ratio(g, o)} | {hangs} | {fails} | {d['runs']} |")


def med(vals, scale, fmt="{:.0f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    return fmt.format(statistics.median(vals) / scale)


def phases(paths):
    """One row per gorun command: wall time and the medians of its summary's phases."""
    print("| case | wall ms | connected ms | agents up ms | ranks started ms | all exited ms | head RSS MiB median (max) | largest agent RSS MiB | hangs | failures | runs with summary |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        d = json.load(open(p))
        for t in d["tools"]:
            ok = [r for r in t["runs"] if r["outcome"] == "ok"]
            sm = [r["summary"] for r in ok if "phases_ns" in r.get("summary", {})]
            ph = [x["phases_ns"] for x in sm]
            head = [x["head_max_rss_kb"] for x in sm]
            hmax = "-" if not head else f"{max(head) / 1024:.1f}"
            print(f"| {t['label']} | {cell(t)} | {med([x.get('connected_ns') for x in ph], 1e6)} | "
                  f"{med([x['agents_up_ns'] for x in ph], 1e6)} | "
                  f"{med([x['ranks_started_ns'] for x in ph], 1e6)} | {med([x['all_exited_ns'] for x in ph], 1e6)} | "
                  f"{med(head, 1024, '{:.1f}')} ({hmax}) | {med([x['agent_max_rss_kb'] for x in sm], 1024, '{:.1f}')} | "
                  f"{t['hangs']} | {t['failures']} | {len(sm)} of {len(t['runs'])} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--by-tag"]:
        by_tag(sys.argv[2:])
    elif sys.argv[1:2] == ["--by-tag-kex"]:
        by_tag(sys.argv[2:], "-kex")
    elif sys.argv[1:2] == ["--phases"]:
        phases(sys.argv[2:])
    elif sys.argv[1:2] == ["--jobs"]:
        jobs(sys.argv[2:])
    elif sys.argv[1:2] == ["--pair"]:
        pair(sys.argv[2:])
    else:
        main(sys.argv[1:])
