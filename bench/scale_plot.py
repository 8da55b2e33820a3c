#!/usr/bin/env python3
"""scale_plot.py - table and plot of bench/scale_sweep.sh's runs (bench/scale.sh --sim).

    scale_plot.py SCALE.jsonl [OUT]      (OUT defaults to the folder of SCALE.jsonl)

Reads one JSON object a line, as bench/scale.sh prints them:
  {"hosts":2048,"ranks":16384,"ranks_per_host":8,"fanout":0,"mode":"flat",
   "launch_s":1.23,"fence_s":0.15,"fail_stop_s":0.4,"teardown_s":0.2,
   "head_rss_mb":120.5,"head_cpu_s":3.2,...}
"mode" is taken from "fanout" (0: flat, else tree) where it is missing. A line with an
"error" field (a run that failed or timed out), a figure that is null or not a number,
and a line that is not JSON are left out of the medians and the plot.

Groups the runs by (mode, hosts) and takes, per figure, the median over the runs that
completed. Writes
  OUT/table.md   one row per N: each figure flat and tree ("-": no value, "error": only
                 failed runs), the tree's launch over log2(N) (and that relative to the
                 smallest N: about 1.00 all along when the tree's launch grows like
                 log N), the runs completed/made, and the targets at N=2048;
  OUT/scale.svg  one panel per figure, x: log2(N) with a tick at each N, y: linear;
                 flat and tree as lines with markers, a dashed c*log2(N) through the
                 tree's first point, and the target at N=2048 as a dotted line.
and prints the table. Standard library only.
"""
import json
import math
import os
import statistics
import sys
from xml.sax.saxutils import escape

FIGURES = [  # key, unit, target at N=2048 (None: none)
    ("launch_s", "s", 2.0),
    ("fence_s", "s", 0.2),
    ("fail_stop_s", "s", 1.0),
    ("teardown_s", "s", None),
    ("head_rss_mb", "MB", 256.0),
    ("head_cpu_s", "s", None),
]
TARGET_N = 2048
MODES = ["flat", "tree"]
COLORS = {"flat": "#1f77b4", "tree": "#d62728"}


def num(x):
    """x as a finite float, or None (null, bool, string, NaN, missing)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def fmt(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def mode_of(r):
    m = r.get("mode")
    if m in MODES:
        return m
    f = r.get("fanout")
    if f in (0, "0"):
        return "flat"
    return "tree" if f is not None else None


def load(path):
    rows, bad = [], 0
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                bad += 1
                print(f"scale_plot.py: {path}:{i}: not JSON, left out", file=sys.stderr)
                continue
            if not isinstance(r, dict):
                bad += 1
                print(f"scale_plot.py: {path}:{i}: not a JSON object, left out", file=sys.stderr)
                continue
            hosts = num(r.get("hosts"))
            mode = mode_of(r)
            if hosts is None or hosts < 1 or mode is None:
                bad += 1
                print(f"scale_plot.py: {path}:{i}: no hosts or mode, left out", file=sys.stderr)
                continue
            r["hosts"], r["mode"] = int(hosts), mode
            rows.append(r)
    return rows, bad


class Group:
    """The runs of one (mode, hosts)."""

    def __init__(self, runs):
        self.runs = runs
        self.ok = [r for r in runs if not r.get("error")]
        self.errors = [str(r["error"]) for r in runs if r.get("error")]

    def median(self, key):
        vals = [v for v in (num(r.get(key)) for r in self.ok) if v is not None]
        return statistics.median(vals) if vals else None

    def cell(self, key):
        m = self.median(key)
        if m is not None:
            return fmt(m)
        return "error" if self.errors and not self.ok else "-"

    def fanouts(self):
        return sorted({str(r.get("fanout")) for r in self.ok if r.get("fanout") is not None})


def summarize(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["mode"], r["hosts"]), []).append(r)
    return {k: Group(v) for k, v in groups.items()}


def uniform(rows, key):
    vals = {json.dumps(r.get(key)) for r in rows if r.get(key) is not None}
    return json.loads(vals.pop()) if len(vals) == 1 else None


def table(rows, groups, ns):
    lines = []
    rph = uniform(rows, "ranks_per_host")
    lat = uniform(rows, "latency_us")
    ctx = []
    if rph is not None:
        ctx.append(f"{rph} ranks per host")
    if lat is not None:
        ctx.append(f"latency {lat} us")
    tf = sorted({f for (m, n), g in groups.items() if m == "tree" for f in g.fanouts()})
    if tf:
        ctx.append("tree fanout " + "/".join(tf))
    runs = sorted({len(g.runs) for g in groups.values()})
    ctx.append("median of " + "/".join(map(str, runs)) + " run(s) per cell")
    lines.append("Scale sweep (bench/scale.sh --sim): " + ", ".join(ctx) + ".")
    lines.append("")
    head = ["N", "ranks"]
    for key, unit, _ in FIGURES:
        for m in MODES:
            head.append(f"{key} {m}")
    head += ["tree launch / log2 N (rel. to first N)", "runs ok flat / tree"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    first = None
    empty = Group([])
    for n in ns:
        gs = {m: groups.get((m, n), empty) for m in MODES}
        ranks = None
        for g in gs.values():
            ranks = ranks or uniform(g.runs, "ranks")
        if ranks is None and rph is not None:
            ranks = n * rph
        cells = [str(n), "-" if ranks is None else str(ranks)]
        for key, _, _ in FIGURES:
            for m in MODES:
                cells.append(gs[m].cell(key))
        t = gs["tree"].median("launch_s")
        norm = "-"
        if t is not None and n > 1:
            per = t / math.log2(n)
            if first is None:
                first = per
            norm = f"{fmt(per)} s (x{per / first:.2f})" if first > 0 else fmt(per)
        cells.append(norm)
        cells.append(" / ".join(f"{len(gs[m].ok)}/{len(gs[m].runs)}" for m in MODES))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    targets = [(k, u, t) for k, u, t in FIGURES if t is not None]
    lines.append(f"Targets at N={TARGET_N}: " + ", ".join(f"{k} <= {fmt(t)} {u}" for k, u, t in targets) + ".")
    for m in MODES:
        g = groups.get((m, TARGET_N))
        if g is None:
            continue
        verdict = []
        for k, u, t in targets:
            v = g.median(k)
            verdict.append(f"{k} {'-' if v is None else fmt(v) + ' ' + u} "
                           f"{'n/a' if v is None else ('ok' if v <= t else 'MISSED')}")
        lines.append(f"- {m} at N={TARGET_N}: " + "; ".join(verdict))
    errs = [(m, n, e) for (m, n), g in sorted(groups.items(), key=lambda x: (x[0][1], x[0][0]))
            for e in g.errors]
    if errs:
        lines.append("")
        lines.append(f"Failed runs ({len(errs)}):")
        for m, n, e in errs[:20]:
            lines.append(f"- {m} N={n}: {e[:200]}")
        if len(errs) > 20:
            lines.append(f"- ... and {len(errs) - 20} more")
    return "\n".join(lines) + "\n"


# ---- SVG ----

def nice_ticks(hi, count=5):
    """Ticks 0..top, step 1/2/5 x 10^k, top >= hi."""
    if hi <= 0:
        hi = 1.0
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    top = step * math.ceil(hi / step - 1e-9)
    ticks = [i * step for i in range(int(round(top / step)) + 1)]
    return ticks, top


def tick_label(v, step):
    d = next((d for d in range(7) if abs(round(step, d) - step) < step * 1e-6), 6)
    return f"{v:.{d}f}"


def panel(out, x0, y0, w, h, key, unit, target, groups, ns):
    ml, mr, mt, mb = 46, 12, 22, 30  # margins inside the panel
    pw, ph = w - ml - mr, h - mt - mb
    lx = [math.log2(n) for n in ns]
    xmin, xmax = min(lx), max(lx)
    if xmax - xmin < 1e-9:
        xmin, xmax = xmin - 1, xmax + 1
    pad = (xmax - xmin) * 0.04
    xmin, xmax = xmin - pad, xmax + pad

    series = {}
    for m in MODES:
        pts = []
        for n in ns:
            g = groups.get((m, n))
            pts.append((n, g.median(key) if g else None))
        series[m] = pts
    ref = None
    tree_pts = [(n, v) for n, v in series["tree"] if v is not None and n > 1]
    if tree_pts:
        n0, v0 = tree_pts[0]
        c = v0 / math.log2(n0)
        ref = [(n, c * math.log2(n)) for n in ns if n > 1]
    vals = [v for m in MODES for _, v in series[m] if v is not None]
    if ref:
        vals += [v for _, v in ref]
    if target is not None:
        vals.append(target)
    ticks, top = nice_ticks(max(vals) * 1.08 if vals else 1.0)  # headroom: a target never on the frame
    step = ticks[1] - ticks[0] if len(ticks) > 1 else top

    def X(n):
        return x0 + ml + (math.log2(n) - xmin) / (xmax - xmin) * pw

    def Y(v):
        return y0 + mt + ph - (v / top) * ph

    o = out.append
    o(f'<g id="panel-{key}">')
    o(f'<text x="{x0 + ml + pw / 2:.1f}" y="{y0 + 14}" text-anchor="middle" font-size="12" '
      f'font-weight="bold">{escape(key)} ({escape(unit)})</text>')
    o(f'<rect x="{x0 + ml}" y="{y0 + mt}" width="{pw}" height="{ph}" fill="none" stroke="#888" stroke-width="0.8"/>')
    # y grid and labels
    for t in ticks:
        y = Y(t)
        o(f'<line x1="{x0 + ml}" y1="{y:.1f}" x2="{x0 + ml + pw}" y2="{y:.1f}" stroke="#e4e4e4" stroke-width="0.6"/>')
        o(f'<text x="{x0 + ml - 4}" y="{y + 3:.1f}" text-anchor="end" font-size="9">{tick_label(t, step)}</text>')
    # x ticks at each N, labels left out where they would overlap the previous one
    last_right = -1e9
    for n in ns:
        x = X(n)
        o(f'<line x1="{x:.1f}" y1="{y0 + mt + ph}" x2="{x:.1f}" y2="{y0 + mt + ph + 4}" stroke="#555" stroke-width="0.8"/>')
        o(f'<line x1="{x:.1f}" y1="{y0 + mt}" x2="{x:.1f}" y2="{y0 + mt + ph}" stroke="#f0f0f0" stroke-width="0.6"/>')
        lab = str(n)
        half = len(lab) * 2.7
        if x - half > last_right + 2:
            o(f'<text x="{x:.1f}" y="{y0 + mt + ph + 14}" text-anchor="middle" font-size="9">{lab}</text>')
            last_right = x + half
    o(f'<text x="{x0 + ml + pw / 2:.1f}" y="{y0 + h - 3}" text-anchor="middle" font-size="9" fill="#555">'
      f'N hosts (log2 scale)</text>')
    if not any(v is not None for m in MODES for _, v in series[m]):
        o(f'<text x="{x0 + ml + pw / 2:.1f}" y="{y0 + mt + ph / 2:.1f}" text-anchor="middle" '
          f'font-size="11" fill="#999">no data</text>')
    # target at N=2048
    if target is not None:
        y = Y(target)
        o(f'<line x1="{x0 + ml}" y1="{y:.1f}" x2="{x0 + ml + pw}" y2="{y:.1f}" stroke="#2ca02c" '
          f'stroke-width="1.2" stroke-dasharray="1.5,3" stroke-linecap="round"/>')
        o(f'<text x="{x0 + ml + 3}" y="{y - 3:.1f}" font-size="8.5" fill="#2ca02c">'
          f'target at N={TARGET_N}: {fmt(target)} {escape(unit)}</text>')
    # reference c*log2(N)
    if ref and len(ref) > 1:
        pts = " ".join(f"{X(n):.1f},{Y(v):.1f}" for n, v in ref)
        o(f'<polyline points="{pts}" fill="none" stroke="#777" stroke-width="1" stroke-dasharray="5,3"/>')
    # series: a line through consecutive values (broken where one is missing), markers
    for m in MODES:
        seg = []
        segs = []
        for n, v in series[m]:
            if v is None:
                if seg:
                    segs.append(seg)
                seg = []
            else:
                seg.append((X(n), Y(v)))
        if seg:
            segs.append(seg)
        for s in segs:
            if len(s) > 1:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in s)
                o(f'<polyline points="{pts}" fill="none" stroke="{COLORS[m]}" stroke-width="1.6"/>')
            for x, y in s:
                o(marker(m, x, y))
    o('</g>')


def marker(m, x, y):
    if m == "flat":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS[m]}"/>'
    return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{COLORS[m]}"/>'


def svg(rows, groups, ns):
    cols, pw, ph = 3, 330, 230
    top = 56
    width = cols * pw + 10
    height = top + math.ceil(len(FIGURES) / cols) * ph + 10
    out = [f'<?xml version="1.0" encoding="UTF-8"?>',
           f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']
    rph = uniform(rows, "ranks_per_host")
    title = "gorun scale sweep (scale.sh --sim)"
    if rph is not None:
        title += f", {rph} ranks per host"
    lat = uniform(rows, "latency_us")
    if lat is not None:
        title += f", latency {lat} us"
    title += ": medians"
    out.append(f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">'
               f'{escape(title)}</text>')
    # legend
    lx, ly = 20, 38
    for m in MODES:
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{COLORS[m]}" stroke-width="1.6"/>')
        out.append(marker(m, lx + 12, ly))
        out.append(f'<text x="{lx + 30}" y="{ly + 4}" font-size="11">{m}</text>')
        lx += 80
    out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="#777" stroke-width="1" stroke-dasharray="5,3"/>')
    out.append(f'<text x="{lx + 30}" y="{ly + 4}" font-size="11">c*log2(N) through the tree\'s first point</text>')
    lx += 290
    out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="#2ca02c" stroke-width="1.2" '
               f'stroke-dasharray="1.5,3" stroke-linecap="round"/>')
    out.append(f'<text x="{lx + 30}" y="{ly + 4}" font-size="11">target at N={TARGET_N}</text>')
    for i, (key, unit, target) in enumerate(FIGURES):
        x0 = 5 + (i % cols) * pw
        y0 = top + (i // cols) * ph
        panel(out, x0, y0, pw, ph, key, unit, target, groups, ns)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    out = argv[2] if len(argv) == 3 else (os.path.dirname(path) or ".")
    rows, bad = load(path)
    if not rows:
        print(f"scale_plot.py: no usable line in {path}", file=sys.stderr)
        return 1
    groups = summarize(rows)
    ns = sorted({n for _, n in groups})
    os.makedirs(out, exist_ok=True)
    md = table(rows, groups, ns)
    if bad:
        md += f"\n({bad} line(s) of {path} unreadable, left out)\n"
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "scale.svg"), "w") as f:
        f.write(svg(rows, groups, ns))
    sys.stdout.write(md)
    print(f"\nwrote {os.path.join(out, 'table.md')} and {os.path.join(out, 'scale.svg')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
