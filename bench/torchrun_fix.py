"""torchrun_fix.py - torchrun (torch.distributed.run), with one bug of Debian's
torch fixed, for bench/torchrun.sh.

Debian 12 has torch 1.13 and Python 3.11. From Python 3.11 on, iterating over an
IntFlag yields only its single-bit members, so torch 1.13's Std.from_str, which
looks a value up by iterating over Std, finds no member for "0" (the default of
--redirects and --tee) and returns None; torchrun then dies at start in to_map
("'NoneType' object has no attribute ..."). Stock torchrun runs only with both
--redirects and --tee set to 1 or 2.

How: this file replaces Std.from_str with one that builds the member from its
value, Std(int(text)), for "N" and for per-rank maps "0:N,1:M", then runs
torch.distributed.run as `python3 -m` would, with the same arguments:

    /usr/bin/python3 bench/torchrun_fix.py --standalone --nproc_per_node 2 noop.py

Nothing else of torchrun changes, so its timings are torchrun's. (A torch whose
Std.from_str works is left alone.)
"""
import runpy
import sys

from torch.distributed.elastic.multiprocessing import api


def _std_from_str(text):
    """Std.from_str that works on Python 3.11: "N" or "RANK:N,RANK:N"."""
    def one(v):
        if v not in ("0", "1", "2", "3"):
            raise ValueError(f"{text}: expected 0 to 3, or a map such as 0:1,1:2")
        return api.Std(int(v))

    if ":" not in text:
        return one(text)
    out = {}
    for part in text.split(","):
        rank, _, v = part.partition(":")
        if not rank.isdigit():
            raise ValueError(f"{text}: expected 0 to 3, or a map such as 0:1,1:2")
        out[int(rank)] = one(v)
    return out


if api.Std.from_str("0") is None:
    api.Std.from_str = staticmethod(_std_from_str)
sys.argv[0] = "torchrun"
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
