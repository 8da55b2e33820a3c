#!/usr/bin/env python3
"""realscale_run.py - timecmp.py's interleaved rounds, plus where the CPU went.

    realscale_run.py --runs N [--warmup W] [--timeout S] [--json FILE] [--tag TEXT] \
        [--summary-dir DIR] [--hosts-cgroup DIR] [--settle S] LABEL='cmd arg ...' ...

As timecmp.py (whose descendants() and kill_tree() it uses): W warm-up rounds, then
N rounds of A B C A B C ...; each run is a fresh process in its own session with
stdin/stdout/stderr on /dev/null; a run over --timeout is a hang (killed with every
descendant), one that exits non-zero a failure, both left out of the statistics.
@SUMMARY@ in a command becomes a fresh DIR/LABEL-RUN.json, gorun's --summary-json.

Each command is started straight from this process (no shell in between), so that
when it exits its rusage is the launcher's own CPU plus that of the children it
reaped. Per run it records:

  seconds        wall time, start to exit (a pidfd wakes us at the exit)
  cpu_s          user+sys of the launcher and its reaped children, from wait4's
                 rusage (microseconds)
  self_ticks, children_ticks
                 the same split in two: utime+stime and cutime+cstime of the exited
                 launcher, read from /proc/PID/stat while it is a zombie (waitid
                 with WNOWAIT), in clock ticks (1/100 s). children_ticks == 0 with a
                 cpu_s of many ticks says the launcher started no process of its
                 own (gorun over SSH: Go's SSH library, no ssh client)
  machine_busy_s the CPU time (all CPUs, everything but idle and iowait) that the
                 machine spent between start and exit, from /proc/stat
  hosts_cpu_s    with --hosts-cgroup (a cgroup-v1 cpuacct folder holding every fake
                 host's sshd, whose children inherit it): the CPU of everything on
                 the hosts for this run - the sshd connection processes, the shells,
                 agents or proxies, the ranks - from cpuacct.usage (nanoseconds),
                 read once the hosts are idle again (only the daemons left in the
                 cgroup, or --settle seconds; what is still there then is killed
                 by pid and counted in "leftovers")
  foreign_s      machine_busy_s less cpu_s and hosts_cpu_s: what else ran meanwhile
  max_rss_kb     wait4's ru_maxrss
  quiet_wait_s, load_before
                 with --quiet-wait S: before each run it waits (up to S seconds) for the
                 machine to be nearly idle (under 0.25 CPUs busy over 0.2 s), so that a
                 run does not start in the middle of someone else's burst

Prints one tab-separated line per command (label median min max mean ok hangs
failures, seconds) and with --json writes every run. Python 3 standard library.
"""
import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timecmp import kill_tree, read_summary, stats, with_summary, SUMMARY_WORD  # noqa: E402

IDLE_FIELDS = (3, 4)  # idle, iowait in the "cpu" line of /proc/stat (0-based after "cpu")
TICK = os.sysconf("SC_CLK_TCK")


def machine_busy():
    """Seconds of non-idle CPU since boot, all CPUs (/proc/stat, clock ticks)."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice: guest is in user
    busy = sum(v for i, v in enumerate(vals[:8]) if i not in IDLE_FIELDS)
    return busy / TICK


def cg_usage(cg):
    with open(os.path.join(cg, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


def cg_procs(cg):
    with open(os.path.join(cg, "cgroup.procs")) as f:
        return {int(x) for x in f.read().split()}


def zombie_ticks(pid):
    """(utime+stime, cutime+cstime) of an exited, not yet reaped process, in ticks."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        # after the comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        return int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])
    except (OSError, IndexError, ValueError):
        return None, None


def run_once(argv, timeout, env, cwd=None):
    """Runs argv; returns a record (see the module doc) without the host side."""
    b0 = machine_busy()
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=env, cwd=cwd)
    fd = os.pidfd_open(p.pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    b1 = machine_busy()
    if not ready:
        kill_tree(p.pid)
        p.wait()
        return {"seconds": None, "outcome": "hang"}
    # Leave it a zombie for a moment: its /proc/PID/stat still holds its times.
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    self_t, child_t = zombie_ticks(p.pid)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)  # so that Popen does not wait again
    rc = p.returncode
    rec = {"seconds": dt if rc == 0 else None, "wall_s": dt, "outcome": "ok" if rc == 0 else f"exit {rc}",
           "cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "self_ticks": self_t, "children_ticks": child_t, "max_rss_kb": ru.ru_maxrss,
           "machine_busy_s": b1 - b0}
    return rec


def wait_quiet(limit, window=0.2, threshold=0.25):
    """Waits until the machine is nearly idle (under threshold CPUs busy over a window)
    or limit seconds pass; returns (seconds waited, CPUs busy in the last window)."""
    t0 = time.perf_counter()
    while True:
        b0 = machine_busy()
        time.sleep(window)
        load = (machine_busy() - b0) / window
        if load < threshold or time.perf_counter() - t0 >= limit:
            return time.perf_counter() - t0, load


def settle(cg, idle, limit):
    """Waits until only the idle processes are left in cgroup cg; kills the rest
    (by pid) after limit seconds. Returns (seconds waited, pids killed)."""
    t0 = time.perf_counter()
    while True:
        extra = cg_procs(cg) - idle
        if not extra:
            return time.perf_counter() - t0, []
        if time.perf_counter() - t0 > limit:
            for pid in extra:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
            return time.perf_counter() - t0, sorted(extra)
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json")
    ap.add_argument("--tag", default="")
    ap.add_argument("--summary-dir")
    ap.add_argument("--hosts-cgroup", help="cgroup-v1 cpuacct folder of the fake hosts' sshd")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds to wait for the hosts to go idle")
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before each run, wait up to this many seconds for the machine to be idle")
    ap.add_argument("cmds", nargs="+", metavar="LABEL=CMD")
    a = ap.parse_args()
    tools = []
    for spec in a.cmds:
        label, sep, cmd = spec.partition("=")
        if not sep or not cmd.split():
            ap.error(f"bad command spec {spec!r}: want LABEL='cmd args'")
        tools.append({"label": label, "argv": cmd.split(), "runs": []})
    env = {k: v for k, v in os.environ.items() if not k.startswith("GORUN_")}
    idle = None
    if a.hosts_cgroup:
        idle = cg_procs(a.hosts_cgroup)
    if a.summary_dir:
        os.makedirs(a.summary_dir, exist_ok=True)

    def one(t, name):
        argv, path = t["argv"], None
        if a.summary_dir and SUMMARY_WORD in argv:
            path = os.path.join(a.summary_dir, f"{t['label']}-{name}.json")
            if os.path.exists(path):
                os.unlink(path)
            argv = with_summary(argv, path)
        quiet = wait_quiet(a.quiet_wait) if a.quiet_wait > 0 else None
        h0 = cg_usage(a.hosts_cgroup) if idle is not None else None
        rec = run_once(argv, a.timeout, env)
        if quiet:
            rec["quiet_wait_s"], rec["load_before"] = quiet
        if idle is not None:
            waited, killed = settle(a.hosts_cgroup, idle, a.settle)
            rec["hosts_cpu_s"] = cg_usage(a.hosts_cgroup) - h0
            rec["settle_s"] = waited
            if rec.get("cpu_s") is not None:
                # What ran beside this run: the machine's CPU less the launcher's and
                # the hosts' (other users' jobs; the kernel's own threads).
                rec["foreign_s"] = rec["machine_busy_s"] - rec["cpu_s"] - rec["hosts_cpu_s"]
            if killed:
                rec["leftovers"] = killed
                print(f"realscale_run: {t['label']} run {name}: {len(killed)} processes still on the "
                      f"hosts after {a.settle:.0f} s, killed", file=sys.stderr)
        if path and rec["outcome"] == "ok":
            rec["summary"] = read_summary(path)
        return rec

    for w in range(a.warmup):
        for t in tools:
            one(t, f"w{w}")
    for i in range(a.runs):
        for t in tools:
            rec = one(t, str(i))
            rec["round"] = i
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
                       "clk_tck": TICK, "ncpu": os.cpu_count(),
                       "runner_max_rss_kb": __import__("resource").getrusage(0).ru_maxrss,
                       "loadavg_end": open("/proc/loadavg").read().split()[:3], "tools": tools},
                      f, indent=1)
    return 0 if all(t["ok"] for t in tools) else 1


if __name__ == "__main__":
    sys.exit(main())
