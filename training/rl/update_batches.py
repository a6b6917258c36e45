"""A GRPO step's experience cut into its optimizer updates' micro-batches.

Update u takes the global batch's prompts at positions p with p % mini_batches == u, whichever ranks
hold them: the same prompts at every world size, and each rank holds its share of every update (a
contiguous split would leave most ranks padding through most updates). A micro-batch holds the rows
of (prompt, completion) pairs, each completion's advantage and, with the rollout correction on, the
sampler's log-probabilities where the labels hold its tokens.
"""

from __future__ import annotations

import math

import torch

from training.batches import IGNORE_INDEX, BatchShape, collate
from training.rl.experience import Experience, training_row


def update_shares(plan, mini_batches: int) -> list[list[list[int]]]:
    """For each optimizer update, every rank's own prompts in it (indices into the rank's share)."""
    return [[[i for i in range(n) if (off + i) % mini_batches == u] for off, n in zip(plan.offsets, plan.local_batches)]
            for u in range(mini_batches)]


def update_chunks(plan, rank: int, mini_batches: int, group_size: int, rows: int) -> list[list[list[tuple[int, int]]]]:
    """For each update, this rank's micro-batches of (prompt, completion) pairs, at most `rows` each:
    as many micro-batches on every rank (the largest share's count), the last ones empty where a
    rank's share is smaller."""
    chunked = []
    for share in update_shares(plan, mini_batches):
        mine = [(p, i) for p in share[rank] for i in range(group_size)]
        count = max(math.ceil(len(prompts) * group_size / rows) for prompts in share)
        chunked.append([mine[k * rows:(k + 1) * rows] for k in range(count)])
    return chunked


def micro_batch(experience: Experience, advantages: torch.Tensor, completions: list[tuple[int, int]],
                shape: BatchShape, group_size: int, sampler_log_probs: bool) -> dict:
    """The collated rows of these (prompt, completion) pairs with their advantages (and, where asked,
    the sampler's log-probabilities), before any forward."""
    rows = [training_row(experience.groups[p], experience.completions[p][i]) for p, i in completions]
    batch = collate(rows, shape)
    batch["advantages"] = torch.zeros(shape.rows, dtype=torch.float64)
    batch["advantages"][:len(rows)] = torch.tensor([float(advantages[p * group_size + i]) for p, i in completions],
                                                   dtype=torch.float64)
    if sampler_log_probs:
        batch["rollout_log_probs"] = torch.zeros(batch["labels"].shape)
        for row, (p, i) in enumerate(completions):
            completion = experience.completions[p][i]
            start, values = len(completion.prompt_ids or experience.groups[p].prompt_ids) - 1, completion.log_probs
            batch["rollout_log_probs"][row, start:start + len(values)] = torch.tensor(values)
    return batch


def largest_micro_batch(shape: BatchShape, prompt_tokens: int, completion_tokens: int, vocab: int,
                        carried: tuple[str, ...]) -> dict:
    """An update's micro-batch at its largest, for the memory trace: every prompt and completion at its
    budget, with the per-token log-probabilities the update carries (`carried`: their keys)."""
    ids = [i % vocab for i in range(prompt_tokens + completion_tokens)]
    labels = [IGNORE_INDEX] * prompt_tokens + ids[prompt_tokens:]
    batch = collate([{"input_ids": ids, "labels": labels, "sample_ids": [n], "lengths": [len(ids)]}
                     for n in range(shape.rows)], shape)
    batch["advantages"] = torch.zeros(shape.rows, dtype=torch.float64)
    for key in carried:
        batch[key] = torch.zeros(batch["labels"].shape)
    return batch
