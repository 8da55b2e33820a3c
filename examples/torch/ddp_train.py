#!/usr/bin/env python3
"""Tiny PyTorch DistributedDataParallel job for gorun (CPU, gloo, env://).

Run:  gorun -np 4 /usr/bin/python3 examples/torch/ddp_train.py

Every rank trains the same small MLP on its own synthetic data shard (seeded
by RANK), so local gradients differ and only DDP's allreduce keeps the
replicas identical. The initial weights are seeded by RANK too, so DDP's
broadcast from rank 0 at construction is also exercised. At the end each rank
prints

    rank R/W weights sha256=<hex> sum=<float>

and the ranks compare their hashes with all_gather; any mismatch (or a DDP
gradient that is not the mean of the local ones) exits non-zero.

Environment (set by gorun, or by torchrun): RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT.
Knobs for tests:
  DDP_STEPS=N             training steps (default 20)
  DDP_FAIL_ONCE_RANK=R    rank R exits with code 7 on the first start only
                          (TORCHELASTIC_RESTART_COUNT == 0), to exercise
                          gorun --max-restarts
  DDP_FAIL_AT=init|step   where that rank fails: before init_process_group,
                          or after the first training step (default step)
  DDP_TIMEOUT=SECONDS     gloo rendezvous/collective timeout (default 60)
"""

import os

# One thread per rank: N ranks on a small box would otherwise oversubscribe.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import datetime  # noqa: E402
import hashlib  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

FAIL_EXIT_CODE = 7
MISMATCH_EXIT_CODE = 3


def log(rank, msg):
    print(f"[ddp rank {rank}] {msg}", file=sys.stderr, flush=True)


def maybe_fail(rank, restart, where):
    target = os.environ.get("DDP_FAIL_ONCE_RANK", "")
    at = os.environ.get("DDP_FAIL_AT", "step")
    if target != "" and int(target) == rank and restart == 0 and at == where:
        log(rank, f"DDP_FAIL_ONCE_RANK={target}: failing at {where} "
                  f"(restart {restart}) with exit code {FAIL_EXIT_CODE}")
        sys.stdout.flush()
        os._exit(FAIL_EXIT_CODE)


def param_checksum(params):
    """sha256 of the concatenated little-endian float32 bytes, and the
    float64 sum of every parameter."""
    h = hashlib.sha256()
    total = 0.0
    for p in params:
        flat = p.detach().to(torch.float32).contiguous().view(-1)
        h.update(struct.pack("<%df" % flat.numel(), *flat.tolist()))
        total += flat.to(torch.float64).sum().item()
    return h.hexdigest(), total


def main():
    t0 = time.monotonic()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    steps = int(os.environ.get("DDP_STEPS", "20"))
    timeout = datetime.timedelta(seconds=float(os.environ.get("DDP_TIMEOUT", "60")))

    maybe_fail(rank, restart, "init")
    # init_method="env://" reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE.
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    assert dist.get_rank() == rank and dist.get_world_size() == world

    # Different initial weights on every rank: DDP must broadcast rank 0's.
    torch.manual_seed(rank)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    # This rank's data shard: same true function, different samples.
    g = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.linspace(-1.0, 1.0, 16).unsqueeze(1)
    x = torch.randn(64, 16, generator=g)
    y = x @ w_true + 0.1 * torch.randn(64, 1, generator=g)
    loss_fn = torch.nn.MSELoss()

    # Check once that local gradients differ across ranks and that DDP's
    # gradient is their mean (i.e. the allreduce really happened).
    opt.zero_grad()
    with ddp.no_sync():
        loss_fn(ddp(x), y).backward()
    local = torch.cat([p.grad.detach().view(-1).clone() for p in model.parameters()])
    opt.zero_grad()
    loss = loss_fn(ddp(x), y)
    loss.backward()
    first_loss = loss.item()
    synced = torch.cat([p.grad.detach().view(-1).clone() for p in model.parameters()])
    mean = local.clone()
    dist.all_reduce(mean)
    mean /= world
    spread = local.clone()
    lo = local.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    ok = True
    if world > 1 and (spread - lo).abs().max().item() == 0.0:
        log(rank, "local gradients are identical on every rank: data shards do not differ")
        ok = False
    if not torch.allclose(synced, mean, rtol=1e-5, atol=1e-6):
        log(rank, "DDP gradient is not the mean of the local gradients "
                  f"(max diff {(synced - mean).abs().max().item():g})")
        ok = False
    opt.step()

    for step in range(1, steps):
        if step == 1:
            maybe_fail(rank, restart, "step")
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
    last_loss = loss.item()

    digest, total = param_checksum(model.parameters())
    print(f"rank {rank}/{world} weights sha256={digest} sum={total:.17g}", flush=True)

    # Compare across ranks: every rank gets every hash.
    mine = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.uint8)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    hashes = [bytes(t.tolist()).hex() for t in gathered]
    if len(set(hashes)) != 1:
        log(rank, "weights differ across ranks: " +
            ", ".join(f"{r}:{h[:12]}" for r, h in enumerate(hashes)))
        ok = False
    ok_t = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(ok_t, op=dist.ReduceOp.MIN)
    dist.barrier()
    dist.destroy_process_group()
    log(rank, f"restart={restart} steps={steps} loss {first_loss} -> {last_loss} "
              f"ok={bool(ok_t.item())} in {time.monotonic() - t0:.2f}s")
    return 0 if ok_t.item() == 1 else MISMATCH_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
