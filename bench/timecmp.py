#!/usr/bin/env python3
"""timecmp.py - wall-clock several commands side by side, surviving hangs.

    timecmp.py --runs N [--warmup W] [--timeout S] [--json FILE] \
        LABEL='cmd arg ...' LABEL='cmd arg ...' ...

Each command is split on blanks (no quoting). Every command runs W times as a
warm-up, then N rounds of A B C A B C ...: each tool runs once per round, so drift
in the machine's load hits all of them equally. Each run is a fresh process in its
own session with stdin/stdout/stderr on /dev/null. A run still going after
--timeout seconds is a hang: it and every descendant (found via /proc, since
launchers move their daemons to other process groups) get SIGKILL, and the run is
left out of the statistics. A run that exits non-zero is a failure, also left out.

With --summary-dir DIR, the word @SUMMARY@ in a command is replaced, run by run,
by a fresh file DIR/LABEL-RUN.json (gorun's --summary-json), and each run's record
keeps that summary's phases and peak RSS (head, and the largest agent's). Such
runs go through `/bin/sh -c '"$@"; exit $?'`, a small process that forks: Linux
carries a process's peak RSS (ru_maxrss) over fork and exec, so gorun started
straight from this Python process would report Python's ~15 MiB as its own peak.

Prints one tab-separated line per command:
    label  median  min  max  mean  ok  hangs  failures    (seconds)
and with --json writes every run's time and outcome. Python 3 standard library only.
"""
import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time


def descendants(root):
    """Pids of every live descendant of root, from /proc/*/stat."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _wait(p, timeout):
    """Wait for p up to timeout seconds; returns the exit code, or None on timeout.

    Not Popen.wait(timeout=...): that polls with sleeps of up to 50 ms, which
    rounds every measurement up to the next poll. A pidfd wakes us at the exit.
    """
    try:
        fd = os.pidfd_open(p.pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        finally:
            os.close(fd)
        return p.wait() if ready else None
    # No pidfd (old kernel or Python): a thread blocks in waitpid instead.
    t = threading.Thread(target=p.wait, daemon=True)
    t.start()
    t.join(timeout)
    return None if t.is_alive() else p.returncode


def kill_tree(root):
    """SIGKILL root and every descendant, freezing them first so none escapes."""
    victims = [root] + descendants(root)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    victims += [q for q in descendants(root) if q not in victims]
    try:
        os.killpg(root, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_once(argv, timeout, env, cwd=None):
    """Returns (seconds or None, outcome) with outcome 'ok', 'hang' or 'exit N'."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=env, cwd=cwd)
    rc = _wait(p, timeout)
    dt = time.perf_counter() - t0
    if rc is None:
        kill_tree(p.pid)
        p.wait()
        return None, "hang"
    return (dt, "ok") if rc == 0 else (None, f"exit {rc}")


SUMMARY_WORD = "@SUMMARY@"
# Runs with a summary start under a forking sh, so that the command's own
# getrusage(RUSAGE_SELF).ru_maxrss does not start at this Python's peak RSS.
RSS_SHIM = ["/bin/sh", "-c", '"$@"; exit $?', "sh"]


def with_summary(argv, path):
    """argv with SUMMARY_WORD replaced by path."""
    return [path if w == SUMMARY_WORD else w for w in argv]


def read_summary(path):
    """The parts of a gorun --summary-json file that the tables use, or an error."""
    try:
        with open(path) as f:
            s = json.load(f)
        return {"phases_ns": s["phases"], "head_max_rss_kb": s["head_max_rss_kb"],
                "agent_max_rss_kb": max((a["max_rss_kb"] for a in s.get("agents") or []), default=None),
                "agents": len(s.get("agents") or []), "ranks": len(s.get("ranks") or [])}
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {"summary_error": str(e)}


def stats(times):
    if not times:
        return {"median": None, "min": None, "max": None, "mean": None}
    return {"median": statistics.median(times), "min": min(times), "max": max(times),
            "mean": statistics.fmean(times)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--json")
    ap.add_argument("--tag", default="", help="free text stored in the JSON")
    ap.add_argument("--summary-dir", help=f"replace {SUMMARY_WORD} in commands by a per-run file here")
    ap.add_argument("cmds", nargs="+", metavar="LABEL=CMD")
    a = ap.parse_args()
    tools = []
    for spec in a.cmds:
        label, sep, cmd = spec.partition("=")
        if not sep or not cmd.split():
            ap.error(f"bad command spec {spec!r}: want LABEL='cmd args'")
        tools.append({"label": label, "argv": cmd.split(), "runs": []})
    # gorun reads GORUN_* settings from the environment: keep the caller's out.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GORUN_")}

    def one(t, name):
        """Runs t once; returns (seconds, outcome, summary record or None)."""
        if not a.summary_dir or SUMMARY_WORD not in t["argv"]:
            dt, outcome = run_once(t["argv"], a.timeout, env)
            return dt, outcome, None
        path = os.path.join(a.summary_dir, f"{t['label']}-{name}.json")
        if os.path.exists(path):
            os.unlink(path)
        dt, outcome = run_once(RSS_SHIM + with_summary(t["argv"], path), a.timeout, env)
        return dt, outcome, (read_summary(path) if outcome == "ok" else None)

    if a.summary_dir:
        os.makedirs(a.summary_dir, exist_ok=True)
    for w in range(a.warmup):
        for t in tools:
            one(t, f"w{w}")
    for i in range(a.runs):
        for t in tools:
            dt, outcome, summ = one(t, str(i))
            rec = {"round": i, "seconds": dt, "outcome": outcome}
            if summ is not None:
                rec["summary"] = summ
            t["runs"].append(rec)

    for t in tools:
        times = [r["seconds"] for r in t["runs"] if r["outcome"] == "ok"]
        t.update(stats(times))
        t["ok"] = len(times)
        t["hangs"] = sum(r["outcome"] == "hang" for r in t["runs"])
        t["failures"] = len(t["runs"]) - t["ok"] - t["hangs"]
        cells = ["nan" if t[k] is None else f"{t[k]:.4f}" for k in ("median", "min", "max", "mean")]
        print("\t".join([t["label"]] + cells + [str(t["ok"]), str(t["hangs"]), str(t["failures"])]),
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tag": a.tag, "runs": a.runs, "warmup": a.warmup, "timeout": a.timeout,
                       "loadavg_end": open("/proc/loadavg").read().split()[:3], "tools": tools},
                      f, indent=1)
    return 0 if all(t["ok"] for t in tools) else 1


if __name__ == "__main__":
    sys.exit(main())
