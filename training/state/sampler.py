"""A resize-safe sampler: the data position is one global counter, not a per-rank state.

The stream is a seeded permutation per epoch laid end to end; global position p is element
p mod N of epoch p // N's permutation. Step s consumes positions [s*B, (s+1)*B) and data-parallel
rank k takes its slice of that window (BatchPlan.offsets), split into the same number of
micro-batches on every rank. The only state is `consumed_samples`, identical on every rank, so a
checkpoint taken at one world size resumes exactly at any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import torch

from training.contract.batching import BatchPlan


class GlobalBatchSampler:
    """Yields, for this rank, `grad_accum_steps` micro-batches (lists of dataset indices) per step,
    starting at `consumed_samples`; a rank with fewer samples gets empty micro-batches."""

    def __init__(self, dataset_len: int, plan: BatchPlan, rank: int, seed: int, consumed_samples: int = 0):
        if dataset_len < 1:
            raise ValueError("the training dataset is empty")
        self.dataset_len, self.plan, self.rank, self.seed = dataset_len, plan, rank, seed
        self.consumed_samples = consumed_samples

    @lru_cache(maxsize=2)
    def _permutation(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.dataset_len, generator=generator).tolist()

    def indices(self, start: int, count: int) -> list[int]:
        """Dataset indices of global positions [start, start + count)."""
        n = self.dataset_len
        return [self._permutation(p // n)[p % n] for p in range(start, start + count)]

    def step_window(self, consumed: int) -> list[int]:
        return self.indices(consumed, self.plan.global_batch)

    def rank_micro_batches(self, consumed: int) -> list[list[int]]:
        window = self.step_window(consumed)
        offset, size = self.plan.offsets[self.rank], self.plan.local_batches[self.rank]
        mine, micro = window[offset : offset + size], self.plan.micro_batch
        return [mine[i * micro : (i + 1) * micro] for i in range(self.plan.grad_accum_steps)]

    def __iter__(self) -> Iterator[list[int]]:
        consumed = self.consumed_samples
        while True:
            yield from self.rank_micro_batches(consumed)
            consumed += self.plan.global_batch


def step_rows(dataset, plan: BatchPlan, rank: int, seed: int, consumed: int) -> list:
    """Data-parallel rank `rank`'s rows of the step that starts at global position `consumed`."""
    sampler = GlobalBatchSampler(len(dataset), plan, rank, seed)
    return [dataset[i] for micro in sampler.rank_micro_batches(consumed) for i in micro]
