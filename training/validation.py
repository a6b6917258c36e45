"""The validation pass: the method's metrics over the whole held-out set, the same numbers at every
world size (each rank a strided share of the rows, one all-reduce)."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from training.runtime.named_sums import added, packed, unpacked


def validate(model, method, rows, micro: int, rank: int, world_size: int, step: int, device) -> dict:
    mine = list(range(rank, len(rows), world_size))
    rounds = math.ceil(math.ceil(len(rows) / world_size) / micro)  # equal on every rank
    model.eval()
    sums = {}
    with torch.no_grad():
        for i in range(rounds):
            batch = method.collate([rows[j] for j in mine[i * micro:(i + 1) * micro]])
            sums = added(sums, method.eval_sums(model, batch, step))
    model.train()
    names, totals = packed(sums, device)
    dist.all_reduce(totals)
    return {"step": step, **method.eval_metrics(unpacked(names, totals.tolist()))}
