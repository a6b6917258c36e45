"""A step's statistics by name, summed over ranks in one all-reduce.

Each part of a step (a method's updates, its rollout, the judge, an agent's environments) returns
its sums as a dict, name -> value: a tensor on the device or a number on the host. The trainer adds
a step's dicts, packs them into one float64 tensor in the order of their sorted names (the same on
every rank, whatever order each part wrote them in), all-reduces that once and reads the totals back
by name. Nothing is read from the device before the all-reduce; a new metric is one new name where
its part computes it.
"""

from __future__ import annotations

import torch

Sums = dict  # name -> torch.Tensor (a scalar) | float


def added(total: Sums, more: Sums) -> Sums:
    """Two dicts of sums added name by name (a name missing from one counts 0 there)."""
    return {name: total.get(name, 0.0) + more.get(name, 0.0) for name in {**total, **more}}


def packed(sums: Sums, device: torch.device) -> tuple[list[str], torch.Tensor]:
    """(the sorted names, their values as one float64 tensor on `device`): the host numbers travel in
    one copy, the device's stay there."""
    names = sorted(sums)
    host = torch.tensor([0.0 if torch.is_tensor(sums[n]) else float(sums[n]) for n in names], dtype=torch.float64)
    host = host.to(device, non_blocking=True)
    values = [sums[n].detach().to(device, torch.float64).reshape(()) if torch.is_tensor(sums[n]) else host[i]
              for i, n in enumerate(names)]
    return names, torch.stack(values) if values else host


def unpacked(names: list[str], values: list[float]) -> dict[str, float]:
    return dict(zip(names, values))
