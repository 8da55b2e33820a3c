"""affinity.py - bench/migrants.sh's affinity printer: each rank prints the
CPUs it may run on, so that two launchers' bindings compare.

    rank R cpus LIST

R is the rank as the launcher gives it (OMPI_COMM_WORLD_RANK, PMI_RANK,
RANK or SLURM_PROCID, the first that is set); LIST is sched_getaffinity's,
as ranges (0-1).
"""
import os


def ranges(cpus):
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


rank = next((os.environ[k] for k in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", "SLURM_PROCID") if k in os.environ), "?")
print(f"rank {rank} cpus {ranges(os.sched_getaffinity(0))}", flush=True)
