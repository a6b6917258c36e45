"""What one rank holds of a sharded (FSDP2 DTensor) parameter, and the whole of it: shared by the
loading, the adapters' initialization and the export."""

from __future__ import annotations

import torch


def local_part(param: torch.Tensor) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """The tensor this rank holds of `param` and where it sits in the full parameter."""
    if not hasattr(param, "device_mesh"):
        return param, tuple(slice(0, n) for n in param.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return param.to_local(), tuple(slice(o, o + n) for o, n in zip(offset, shape))


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a collective on every rank when it is sharded)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
