"""The learning rate at a global step (linear warmup, then cosine decay), and what a schedule changed
since a checkpoint does to it on resume. A function of the step only: every world size agrees."""

from __future__ import annotations

import math
from dataclasses import replace

from training.contract.config import TrainingArgs
from training.state.checkpoint import TrainState


def lr_factor(step: int, args: TrainingArgs) -> float:
    """Linear warmup, then cosine decay to min_learning_rate, as a function of the global step only."""
    if step < args.warmup_steps:
        return (step + 1) / args.warmup_steps
    progress = min(1.0, (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps))
    floor = args.min_learning_rate / args.learning_rate
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def schedule_change(state: TrainState, args: TrainingArgs) -> str:
    """A resumed run's LR schedule differs from its checkpoint's: what that does to the LR."""
    before = replace(args, **state.schedule)
    changed = ", ".join(f"{k} {state.schedule[k]} -> {getattr(args, k)}" for k in state.schedule
                        if state.schedule[k] != getattr(args, k))
    return (f"training_args {changed} since the checkpoint at step {state.step}: the warmup/cosine schedule is "
            f"recomputed, so the LR at step {state.step} moves from {args.learning_rate * lr_factor(state.step, before):.3g} "
            f"to {args.learning_rate * lr_factor(state.step, args):.3g}")
