"""How one global batch splits across data-parallel ranks, and the LR schedule's length: functions of
the config and the data only, so the launcher (validating every size) and the trainer (at its live
size) compute the same numbers. Torch-free."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from training.contract.config import TrainingArgs
from training.contract.errors import ConfigError


def resolve_schedule(args: TrainingArgs, train_rows: int) -> TrainingArgs:
    """max_steps and warmup_steps from max_epochs and lr_warmup_ratio where those are set. A function
    of the training rows and the global batch only, so every size resolves the same schedule."""
    max_steps = max(1, math.ceil(args.max_epochs * train_rows / args.train_batch_size)) if args.max_epochs \
        else args.max_steps
    warmup = round(args.lr_warmup_ratio * max_steps) if args.lr_warmup_ratio is not None else args.warmup_steps
    return dataclasses.replace(args, max_steps=max_steps, warmup_steps=warmup)


@dataclass(frozen=True)
class BatchPlan:
    """How one global batch is split at one data-parallel size. Rank k takes positions
    [offsets[k], offsets[k] + local_batches[k]) of each step's global window, so the set of samples
    per step is the same at every size; only which rank holds which sample changes."""

    global_batch: int
    local_batches: tuple[int, ...]  # per data-parallel rank
    micro_batch: int
    grad_accum_steps: int  # the same on every rank: FSDP collectives must line up

    @property
    def dp_size(self) -> int:
        return len(self.local_batches)

    @property
    def uneven(self) -> bool:
        return len(set(self.local_batches)) > 1

    @property
    def offsets(self) -> tuple[int, ...]:
        out, total = [], 0
        for b in self.local_batches:
            out.append(total)
            total += b
        return tuple(out)

    def describe_local(self) -> str:
        if not self.uneven:
            return str(self.local_batches[0])
        small, large = min(self.local_batches), max(self.local_batches)
        n_small = self.local_batches.count(small)
        return f"{n_small}x{small}+{self.dp_size - n_small}x{large}"


def plan_batches(args: TrainingArgs, dp_size: int, where: str = "training_config.training_args") -> BatchPlan:
    """Validate the batch settings at `dp_size` ranks and derive the per-rank split."""
    B, micro, ub = args.train_batch_size, args.micro_train_batch_size, args.uneven_batch
    if args.min_learning_rate > args.learning_rate:
        raise ConfigError(f"{where}.min_learning_rate={args.min_learning_rate:g} is above learning_rate="
                          f"{args.learning_rate:g}: the cosine decay would rise; lower it to <= {args.learning_rate:g}")
    if B < 1:
        raise ConfigError(f"{where}.train_batch_size={B} must be >= 1")
    if micro < 1:
        raise ConfigError(f"{where}.micro_train_batch_size={micro} must be >= 1")
    if dp_size > B:
        raise ConfigError(f"{where}.train_batch_size={B} is smaller than the data-parallel size {dp_size}: "
                          f"raise train_batch_size to >= {dp_size} or disallow this node count")
    numbers = (ub.num_dp_groups_with_small_batch_size, ub.small_local_batch_size, ub.large_local_batch_size)
    given = [n is not None for n in numbers]
    if any(given) and not ub.use_uneven_batch:
        raise ConfigError(f"{where}.uneven_batch sets batch sizes but use_uneven_batch=false: "
                          f"set use_uneven_batch=true or remove the sizes")
    if any(given) and not all(given):
        raise ConfigError(f"{where}.uneven_batch gives only some of num_dp_groups_with_small_batch_size, "
                          f"small_local_batch_size, large_local_batch_size: give all three or none (derived)")
    if all(given):
        n_small, small, large = numbers
        if not 0 <= n_small <= dp_size:
            raise ConfigError(f"{where}.uneven_batch.num_dp_groups_with_small_batch_size={n_small} is outside "
                              f"[0, {dp_size}] (the data-parallel size): fix it or remove the uneven sizes")
        if not 1 <= small <= large:
            raise ConfigError(f"{where}.uneven_batch small_local_batch_size={small}, large_local_batch_size={large}: "
                              f"need 1 <= small <= large")
        total = n_small * small + (dp_size - n_small) * large
        if total != B:
            raise ConfigError(f"{where}.uneven_batch gives {n_small}x{small} + {dp_size - n_small}x{large} = {total} "
                              f"samples at data-parallel size {dp_size}, but train_batch_size={B}: "
                              f"make them sum to {B} or remove the sizes to derive them")
        local = (small,) * n_small + (large,) * (dp_size - n_small)
    else:
        # Even when B divides; otherwise the smallest possible imbalance, small ranks first.
        small, rem = divmod(B, dp_size)
        local = (small,) * (dp_size - rem) + (small + 1,) * rem
    return BatchPlan(B, local, micro, math.ceil(max(local) / micro))
