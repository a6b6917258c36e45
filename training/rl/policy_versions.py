"""The policies a rollout running behind is drawn by (method_args.max_steps_off_policy = s).

The batch of step t is drawn by the policy after step max(0, t-1-s): a schedule by step number, so
the completions of a step are the same whatever the world size, the timing or a restart. With the
rollout on the training ranks the trainer keeps the s policies before the current one (their
trainable parameters: under LoRA the adapters only), oldest first; a step's rollout is drawn with the
oldest swapped into the model, and once the step is committed the current policy becomes the newest
kept and the oldest goes. At a fresh start all s are the initial weights (the first s+1 steps are
drawn by it). The checkpoint of step t holds them (versions t-s .. t-1), sharded and resharded as
the model is, so a restart at any size draws the next steps as the uninterrupted run would.
"""

from __future__ import annotations

from collections import deque
from contextlib import contextmanager

import torch


class PolicyVersions:
    def __init__(self, model: torch.nn.Module, count: int):
        self.model = model
        self.named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        with torch.no_grad():
            self.kept = deque({name: p.detach().clone() for name, p in self.named} for _ in range(count))

    @contextmanager
    def in_the_model(self, age: int = 0):
        """The model holds the kept policy of `age` (0: the oldest, which a rollout draws with) while
        inside, its own after."""
        self._swap(self.kept[age])
        try:
            yield
        finally:
            self._swap(self.kept[age])

    def advance(self) -> None:
        """The step is committed: the model's policy (the one its update starts from) becomes the newest kept."""
        oldest = self.kept.popleft()
        with torch.no_grad():
            for name, p in self.named:
                oldest[name].copy_(p)
        self.kept.append(oldest)

    def state_dict(self) -> dict:
        """The kept policies by age, oldest "0" (what a checkpoint saves, and loads into in place)."""
        return {str(age): version for age, version in enumerate(self.kept)}

    def _swap(self, version: dict) -> None:
        with torch.no_grad():
            for name, p in self.named:
                held = p.detach().clone()  # one parameter at a time
                p.copy_(version[name])
                version[name].copy_(held)
