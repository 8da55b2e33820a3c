#!/usr/bin/env python3
"""realscale_table.py - the markdown tables of bench/realscale.sh.

    realscale_table.py --scale FILE.json ...   one row per file (case = its tag): wall time,
                                               CPU per host, gorun's phases
    realscale_table.py --where FILE.json       one row per command of part 4
    realscale_table.py --perf OUT WHO FREQ     CPU shares from OUT/perf-WHO-*.txt

FILE.json are realscale_run.py's. Cells are median (min-max) in ms over completed runs;
"CPU ms/host" cells are medians over those runs of the CPU divided by the case's host
count (the first number of its tag). The launcher's CPU is wait4's user+sys: for gorun
the head alone (it starts no process), for the peers their own plus their ssh clients'.
"hosts" is everything the run started on the fake hosts (cpuacct of their sshd group).
"busy" is the machine's non-idle CPU during the run over wall time x CPUs.
"""
import json
import os
import re
import statistics
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import cell, ms  # noqa: E402  (bench/table.py: the cells every table here uses)


def ratio(g, p):
    if not g or not p or g["median"] is None or p["median"] is None:
        return "-"
    return f"{g['median'] / p['median']:.2f}"


def ok_runs(t):
    return [r for r in (t or {}).get("runs", []) if r["outcome"] == "ok"]


def med(vals, fmt="{:.1f}"):
    vals = [v for v in vals if v is not None]
    return fmt.format(statistics.median(vals)) if vals else "-"


def per_host(t, key, hosts):
    return med([r.get(key) * 1e3 / hosts for r in ok_runs(t) if r.get(key) is not None],
               "{:.2f}" if key == "cpu_s" else "{:.1f}")


def busy(t, ncpu, key="machine_busy_s"):
    return med([100 * r[key] / (ncpu * r["wall_s"]) for r in ok_runs(t) if r.get(key) is not None], "{:.0f}%")


def load(p):
    d = json.load(open(p))
    t = {x["label"]: x for x in d["tools"]}
    g = t.get("gorun-flat") or t.get("gorun")
    m = re.search(r"(\d+) hosts", d["tag"])
    return d, t, g, int(m.group(1)) if m else 1


def scale(paths):
    print("\nWall time (ms):\n")
    print("| case | gorun ms | gorun --launch-fanout 8 ms | MPICH hydra ms | Open MPI mpirun ms | gorun / hydra | gorun / Open MPI | hangs gorun / fanout 8 / hydra / ompi | failures | runs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    labels = ["gorun", "gorun-fanout8", "mpich", "openmpi"]
    for p in paths:
        d, t, g, n = load(p)
        f8, hy, om = t.get("gorun-fanout8"), t.get("mpich"), t.get("openmpi")
        tt = dict(t, gorun=g)
        hangs = " / ".join(str(tt[l]["hangs"]) if tt.get(l) else "-" for l in labels)
        fails = " / ".join(str(tt[l]["failures"]) if tt.get(l) else "-" for l in labels)
        print(f"| {d['tag']} | {cell(g)} | {cell(f8) if f8 else '-'} | {cell(hy)} | {cell(om)} | "
              f"{ratio(g, hy)}{' (' + ratio(f8, hy) + ')' if f8 else ''} | {ratio(g, om)} | {hangs} | {fails} | {d['runs']} |")
    print("\nCPU per host (ms; medians). Launcher: gorun's head alone; hydra and mpirun with their ssh clients. "
          "Hosts: everything the run started on the hosts (sshd, shells, agents or proxies, ranks). "
          "Busy: the machine's CPU use over the run; other load: the part of it that was neither "
          "the launcher nor the hosts (other jobs, kernel threads).\n")
    print("| case | launcher: gorun | gorun fanout 8 | hydra | mpirun | hosts: gorun | gorun fanout 8 | hydra | mpirun | busy: gorun / hydra / mpirun | of which other load | gorun head children ticks (max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        d, t, g, n = load(p)
        f8, hy, om = t.get("gorun-fanout8"), t.get("mpich"), t.get("openmpi")
        ncpu = d.get("ncpu", 2)
        kids = [r.get("children_ticks") for r in ok_runs(g)]
        kids = max([k for k in kids if k is not None], default="-")
        print(f"| {d['tag']} | {per_host(g, 'cpu_s', n)} | {per_host(f8, 'cpu_s', n) if f8 else '-'} | "
              f"{per_host(hy, 'cpu_s', n)} | {per_host(om, 'cpu_s', n)} | {per_host(g, 'hosts_cpu_s', n)} | "
              f"{per_host(f8, 'hosts_cpu_s', n) if f8 else '-'} | {per_host(hy, 'hosts_cpu_s', n)} | "
              f"{per_host(om, 'hosts_cpu_s', n)} | {busy(g, ncpu)} / {busy(hy, ncpu)} / {busy(om, ncpu)} | "
              f"{busy(g, ncpu, 'foreign_s')} / {busy(hy, ncpu, 'foreign_s')} / {busy(om, ncpu, 'foreign_s')} | {kids} |")
    print("\ngorun's phases (medians from --summary-json, ms from gorun's start) and its head:\n")
    print("| case | command | wall ms | connected | agents up | ranks started | all exited | head CPU ms | head RSS MiB (max) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        d, t, _, n = load(p)
        for lab in ("gorun-flat", "gorun-fanout8", "gorun"):
            if lab not in t:
                continue
            x = t[lab]
            ok = ok_runs(x)
            ph = [r["summary"]["phases_ns"] for r in ok if "phases_ns" in r.get("summary", {})]
            rss = [r["max_rss_kb"] / 1024 for r in ok]

            def phase(k):
                return med([v.get(k) / 1e6 for v in ph if v.get(k) is not None], "{:.0f}")
            print(f"| {d['tag']} | {lab} | {cell(x)} | {phase('connected_ns')} | {phase('agents_up_ns')} | "
                  f"{phase('ranks_started_ns')} | {phase('all_exited_ns')} | {med([r['cpu_s'] * 1e3 for r in ok], '{:.0f}')} | "
                  f"{med(rss)} ({max(rss, default=0):.1f}) |")


def where(path):
    d, t, _, n = load(path)
    ncpu = d.get("ncpu", 2)
    print(f"\n{d['tag']}; CPU in ms, medians; per host = / {n}\n")
    print("| command | wall ms | launcher CPU | per host | hosts CPU | per host | machine busy (other load) | connected ms | hangs | failures |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in d["tools"]:
        ok = ok_runs(x)
        ph = [r["summary"]["phases_ns"].get("connected_ns") for r in ok if "phases_ns" in r.get("summary", {})]
        print(f"| {x['label']} | {cell(x)} | {med([r['cpu_s'] * 1e3 for r in ok], '{:.0f}')} | {per_host(x, 'cpu_s', n)} | "
              f"{med([r['hosts_cpu_s'] * 1e3 for r in ok], '{:.0f}')} | {per_host(x, 'hosts_cpu_s', n)} | {busy(x, ncpu)} ({busy(x, ncpu, 'foreign_s')}) | "
              f"{med([v / 1e6 for v in ph if v], '{:.0f}')} | {x['hangs']} | {x['failures']} |")


KINDS = [  # (name, test on a sample's frames [(symbol, dso)], leaf first); the first that matches
    ("exec", lambda f: any(s in ("bprm_execve", "load_elf_binary", "__x64_sys_execve") or s.startswith("do_execveat_common") for s, _ in f)),
    ("fork", lambda f: any(s in ("copy_process", "kernel_clone", "__x64_sys_clone", "__x64_sys_clone3", "__do_sys_clone") for s, _ in f)),
    ("exit, unmap", lambda f: any(s in ("do_exit", "exit_mmap", "mmput", "__x64_sys_munmap", "__vm_munmap") for s, _ in f)),
    ("page faults", lambda f: any(s in ("asm_exc_page_fault", "exc_page_fault") for s, _ in f)),
    ("network", lambda f: any(s.startswith(("tcp_", "sock_", "inet_", "__sys_sendto", "__sys_recvfrom", "net_rx_action",
                                            "__netif_receive", "veth_", "br_", "ip_finish", "__dev_queue_xmit", "unix_stream"))
                              for s, _ in f[:25])),
    ("glibc cpuid", lambda f: any(s.startswith(("init_cpu_features", "intel_check_word", "handle_intel", "get_common_cache_info",
                                                "init_cacheinfo", "cpu_features")) for s, _ in f)),
    ("ld.so", lambda f: "ld-linux" in f[0][1]),
    ("libcrypto", lambda f: "libcrypto" in f[0][1]),
    # Debian's ssh and sshd are stripped: their own code shows as addresses. It is mostly
    # OpenSSH's built-in key exchange (curve25519 reference code, sntrup761) and ed25519.
    ("OpenSSH code", lambda f: f[0][1] in ("ssh", "sshd", "sshd-session")),
    ("Go crypto", lambda f: f[0][0].startswith(("crypto/", "golang.org/x/crypto/")) and "/ssh." not in f[0][0]),
    ("Go init", lambda f: any(s in ("runtime.doInit1", "runtime.schedinit", "runtime.doInit") for s, _ in f)),
    ("Go GC", lambda f: any(s.startswith(("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart",
                                           "runtime.gcAssistAlloc", "runtime.markroot", "runtime.gcDrain")) for s, _ in f)),
    ("other kernel", lambda f: f[0][1] == "[kernel.kallsyms]"),
    ("other user", lambda f: True),
]


def group(tgid, comm, head):
    if tgid == head:
        return "head (launcher)"
    if tgid == 0 or comm.startswith("swapper"):
        return "idle"
    if comm == "gorun":
        return "gorun agents"
    if comm.startswith("sshd"):
        return "sshd"
    if comm == "ssh":
        return "ssh clients"
    if comm.startswith(("hydra_pmi_prox", "mpiexec")):
        return "hydra proxies"
    if comm in ("true", "hostname", "hello"):
        return "ranks"
    if comm in ("sh", "bash", "dash"):
        return "shells"
    if comm.startswith("perf"):
        return "perf itself"
    return "other"


HEAD_RE = re.compile(r"^(\S.*?)\s+(\d+)/(\d+)\s*$")
FRAME_RE = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def samples(path):
    """(comm, tgid, frames) of every sample in a `perf script -F comm,pid,tid,ip,sym,dso` dump."""
    import gzip
    cur = None
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            m = HEAD_RE.match(line)
            if m:
                if cur and cur[2]:
                    yield cur
                cur = (m.group(1).strip(), int(m.group(2)), [])
                continue
            m = FRAME_RE.match(line)
            if m and cur is not None:
                sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
                cur[2].append((sym, m.group(2).rsplit("/", 1)[-1]))
    if cur and cur[2]:
        yield cur


HEAD_CATS = [  # (name, test on the joined stack of a head sample); the first that matches
    ("Go GC", lambda j, k: any(x in j for x in ("gcBgMarkWorker", "gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge",
                                                "runtime.gcStart", "runtime.markroot", "runtime.gcDrain"))),
    ("process start, Go init", lambda j, k: any(x in j for x in ("runtime.doInit1", "runtime.schedinit", "_dl_start", "execve"))),
    ("ssh config: a host's settings (Dialer.get)", lambda j, k: "sshclient.(*Dialer).get" in j),
    ("ssh config: loading", lambda j, k: "sshclient.loadConfig" in j or "ssh_config." in j),
    ("SSH: x25519 key exchange, ed25519 host key check and user-auth signature",
     lambda j, k: any(x in j for x in ("curve25519", "edwards25519", "ed25519", "nistec", "bigmod"))),
    ("SSH: packet ciphers and MACs (AES-GCM, ChaCha20, SHA-2)",
     lambda j, k: any(x in j for x in ("gcmCipher", "chacha", "aes", "crypto/internal/fips140/sha", "crypto/sha", "hmac"))),
    ("SSH: socket reads and writes (kernel: TCP over veth and bridge)", lambda j, k: "crypto/ssh" in j and k),
    ("SSH: protocol (packets, channels, mux; Go)", lambda j, k: "crypto/ssh" in j),
    ("gorun launcher (agents' control protocol, plan, output)", lambda j, k: "github.com/gorun/gorun/" in j),
    ("Go scheduler, netpoll, futex", lambda j, k: any(x in j for x in ("netpoll", "findRunnable", "runtime.schedule", "park_m",
                                                                       "runtime.mcall", "futex", "runtime.mstart"))),
    ("other kernel", lambda j, k: k),
    ("other", lambda j, k: True),
]


def perf(out, who, freq):
    head = int(open(f"{out}/perf-{who}.headpid").read())
    kinds = [k for k, _ in KINDS]
    by = {}          # group -> kind -> samples
    others = {}
    self_syms, incl_syms, head_n, head_cats = {}, {}, 0, {}
    for comm, tgid, frames in samples(f"{out}/perf-{who}.script.gz"):
        g = group(tgid, comm, head)
        kind = next(k for k, test in KINDS if test(frames))
        by.setdefault(g, {}).setdefault(kind, 0)
        by[g][kind] += 1
        if g == "other":
            others[comm] = others.get(comm, 0) + 1
        if g == "head (launcher)":
            head_n += 1
            self_syms[frames[0][0]] = self_syms.get(frames[0][0], 0) + 1
            for s in {s for s, _ in frames}:
                incl_syms[s] = incl_syms.get(s, 0) + 1
            joined = " ".join(s for s, _ in frames)
            c = next(name for name, test in HEAD_CATS if test(joined, frames[0][1] == "[kernel.kallsyms]"))
            head_cats[c] = head_cats.get(c, 0) + 1
    busy_n = sum(sum(v.values()) for g, v in by.items() if g != "idle")
    res = {"who": who, "freq": freq, "head_pid": head, "busy_samples": busy_n, "groups": by,
           "head_categories": head_cats, "head_self": sorted(self_syms.items(), key=lambda kv: -kv[1])[:40],
           "head_inclusive": sorted(incl_syms.items(), key=lambda kv: -kv[1])[:200]}
    json.dump(res, open(f"{out}/perf-{who}.json", "w"), indent=1)
    ms_ = lambda n: f"{n * 1e3 / freq:.0f}"
    print(f"perf record -a -g of one {who} run at {freq} Hz per CPU (a sample is {1e3 / freq:.2f} ms of a CPU): "
          f"{busy_n} samples not idle = {ms_(busy_n)} ms of CPU. CPU ms by process (rows) and by what the "
          "CPU did (columns; a sample goes to the first column that matches its call stack):\n")
    used = [k for k in kinds if any(v.get(k) for g, v in by.items() if g != "idle")]
    print("| process | CPU ms | share | " + " | ".join(used) + " |")
    print("|---|---|---|" + "---|" * len(used))
    for g, v in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
        if g == "idle":
            continue
        n = sum(v.values())
        print(f"| {g} | {ms_(n)} | {100 * n / max(busy_n, 1):.1f}% | " + " | ".join(ms_(v.get(k, 0)) for k in used) + " |")
    if others:
        top = sorted(others.items(), key=lambda kv: -kv[1])[:6]
        print("\nother: " + ", ".join(f"{c} {ms_(n)} ms" for c, n in top) + " (not this run: other users' jobs, kernel threads)")
    if head_n:
        print(f"\nThe head ({who}, pid {head}): {head_n} samples = {ms_(head_n)} ms. What it did (a sample goes to "
              "the first line that its call stack matches):\n")
        print("| what | ms | share |")
        print("|---|---|---|")
        for c, n in sorted(head_cats.items(), key=lambda kv: -kv[1]):
            print(f"| {c} | {ms_(n)} | {100 * n / head_n:.1f}% |")
        print("\nIts own functions (self), top 12:\n")
        print("| self % | ms | function |")
        print("|---|---|---|")
        for sym, n in res["head_self"][:12]:
            print(f"| {100 * n / head_n:.1f} | {ms_(n)} | `{sym}` |")
        keep = [(s, n) for s, n in res["head_inclusive"]
                if s.startswith(("github.com/gorun/", "golang.org/x/crypto/", "crypto/", "main."))
                or s in ("runtime.gcBgMarkWorker", "runtime.mallocgc", "runtime.schedule", "runtime.findRunnable",
                         "runtime.netpoll", "runtime.doInit1", "runtime.bgsweep", "_dl_start_user", "runtime.main")]
        if not keep:
            return
        print(f"\nThe head's functions including what they call (inclusive), top 25 of gorun's, Go's crypto and SSH, "
              "and a few of the runtime's:\n")
        print("| incl % | ms | function |")
        print("|---|---|---|")
        for sym, n in keep[:25]:
            print(f"| {100 * n / head_n:.1f} | {ms_(n)} | `{sym}` |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--scale"]:
        scale(sys.argv[2:])
    elif sys.argv[1:2] == ["--where"]:
        where(sys.argv[2])
    elif sys.argv[1:2] == ["--perf"]:
        perf(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
