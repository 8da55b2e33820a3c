#!/usr/bin/python3
"""peer_torch.py - the peer torchrun of bench/migrants.sh: Debian's torch 1.13
under Python 3.11, made to take the command lines of torch's own docs.

    peer_torch.py [torch.distributed.run|torch.distributed.launch] ARGS...

Named torchrun (a symlink), it is torch.distributed.run. Two things differ
from running torch's module directly, neither of them torchrun's behaviour:
  - torch 1.13 spells its flags with '_' only (--nproc_per_node); the docs
    of 2.x write '-' (--nproc-per-node). Every argument that starts with
    '--', up to the first that does not start with '-' (the script), is
    written with '_'.
  - 1.13's Std.from_str fails on Python 3.11 (see bench/torchrun_fix.py);
    it is replaced as torchrun_fix.py does.
"""
import os
import runpy
import sys

from torch.distributed.elastic.multiprocessing import api

args = sys.argv[1:]
module = "torch.distributed.run"
if os.path.basename(sys.argv[0]) != "torchrun" and args and args[0].startswith("torch.distributed."):
    module, args = args[0], args[1:]
out = []
for i, a in enumerate(args):
    if not a.startswith("-"):
        out += args[i:]
        break
    if a.startswith("--"):
        name, eq, val = a.partition("=")
        a = "--" + name[2:].replace("-", "_") + eq + val
    out.append(a)


def _std_from_str(text):
    def one(v):
        return api.Std(int(v))
    if ":" not in text:
        return one(text)
    return {int(r): one(v) for r, _, v in (p.partition(":") for p in text.split(","))}


if api.Std.from_str("0") is None:
    api.Std.from_str = staticmethod(_std_from_str)
sys.argv = [module.rsplit(".", 1)[-1] if module.endswith("launch") else "torchrun"] + out
runpy.run_module(module, run_name="__main__", alter_sys=True)
