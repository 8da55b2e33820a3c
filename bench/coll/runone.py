#!/usr/bin/env python3
"""runone.py - run one benchmark command for bench/coll.sh, surviving hangs.

    runone.py --out FILE --err FILE [--timeout S] [--done-grace S] [--tsv FILE --key K] -- CMD ARG...

CMD runs in a session of its own, stdin on /dev/null, stdout to --out, stderr to --err,
with GORUN_* variables removed from its environment (gorun reads its settings from
them). The outcome is one of:

    ok             exited 0
    exit N         exited N (the benchmarks exit 1 when a result was wrong)
    hang-after-done  the output had its final "# done" line (every size measured and
                   printed), but the command was still running --done-grace seconds
                   later: killed (MPI_Finalize hangs, for instance); the data counts
    timeout        still running after --timeout seconds without "# done": killed,
                   what it printed so far still counts

Killing means SIGKILL to the command and every descendant (found through /proc; frozen
with SIGSTOP first so that none escapes). Processes the command started on other hosts
are not descendants: coll.sh looks for them in the hosts' namespaces.

Prints "KEY<TAB>outcome<TAB>seconds" and appends it to --tsv. Standard library only.
"""
import argparse
import os
import select
import signal
import subprocess
import sys
import time


def descendants(root):
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


def kill_tree(root):
    victims = [root] + descendants(root)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    victims += [q for q in descendants(root) if q not in victims]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def has_done(path):
    """Whether the output file's last lines hold '# done'."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            return any(line.strip() == b"# done" for line in f.read().splitlines())
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--err", required=True)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--done-grace", type=float, default=10)
    ap.add_argument("--tsv")
    ap.add_argument("--key", default="")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GORUN_")}
    t0 = time.monotonic()
    with open(a.out, "wb") as out, open(a.err, "wb") as err:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True, env=env)
    fd = os.pidfd_open(p.pid)
    done_at = None
    outcome = None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            rc = p.wait()
            outcome = "ok" if rc == 0 else f"exit {rc}"
            break
        now = time.monotonic()
        if done_at is None and has_done(a.out):
            done_at = now
        if done_at is not None and now - done_at > a.done_grace:
            outcome = "hang-after-done"
        elif now - t0 > a.timeout:
            outcome = "timeout"
        if outcome:
            kill_tree(p.pid)
            p.wait()
            break
    os.close(fd)
    secs = time.monotonic() - t0
    line = f"{a.key}\t{outcome}\t{secs:.1f}"
    print(line, flush=True)
    if a.tsv:
        with open(a.tsv, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
