"""Micro-batches: the shape a run pads them to, rows collated into padded tensors (SFT's, GRPO's
completions, DPO's pairs), and samples packed into rows."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

IGNORE_INDEX = -100  # a label that carries no loss (the prompt, padding, a tool's reply)


def step_counts(micro_batches: list[dict]) -> list[float]:
    """[label tokens, input tokens, samples' squared lengths, samples] of this rank's micro-batches,
    from the host-side counts collate made."""
    return [float(sum(m[k] for m in micro_batches)) for k in ("label_tokens", "tokens", "squared_lengths", "documents")]


def pack(lengths: list[int], max_len: int) -> list[list[int]]:
    """Best-fit decreasing bin packing: row indices per packed row, each row's total <= max_len.
    Longest samples first, each into the fullest row it still fits (ties by index): fills rows far
    better than greedy packing in dataset order, and is deterministic, so the packed dataset is
    the same on every restart and the sampler can index it."""
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (space left, bin index), sorted
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        at = bisect.bisect_left(free, (lengths[i], -1))
        if at == len(free):
            bins.append([i])
            bisect.insort(free, (max_len - lengths[i], len(bins) - 1))
        else:
            space, b = free.pop(at)
            bins[b].append(i)
            bisect.insort(free, (space - lengths[i], b))
    return bins


@dataclass(frozen=True)
class BatchShape:
    """The shape every micro-batch of a run is padded to, so a compiled function meets as few shapes
    as possible: `rows` rows (the plan's micro-batch; fully masked rows fill a short or empty one)
    and, packed, `max_len` columns; unpacked, the longest row's length rounded up to a power of two
    (at least MIN_WIDTH, at most `max_len`): a handful of widths, which compiled layers take in one
    graph with a dynamic length after the first change."""

    rows: int
    max_len: int
    packed: bool

    def width(self, longest: int) -> int:
        if self.packed:
            return self.max_len
        return max(longest, min(self.max_len, max(MIN_WIDTH, 1 << (longest - 1).bit_length())))


MIN_WIDTH = 16


def collate(rows: list[dict], shape: BatchShape | None = None) -> dict:
    """Right-pad a micro-batch, with no attention mask: attention is causal, so right padding never
    reaches a real token, and SDPA/flex keep their fast kernels. With a `shape` (the trainer's), the
    batch has its rows and width. Each row may hold several packed samples (`lengths`): position ids
    restart at every sample, `document_ids` say which sample each token belongs to (the per-sample
    attention mask: training.model.masks; always given, so every micro-batch builds the same kind of
    mask), and labels are shifted within each sample (labels[t] is the target of position t), so no
    sample learns from its neighbour. Token counts (and the samples' squared lengths, for attention's
    FLOPs) are computed here, on the host, so the training step needs no device-to-host sync for
    them. Padding rows (and an empty micro-batch, which becomes padding rows alone: it keeps
    collectives aligned) hold one masked document each: no labels, no tokens counted, no samples."""
    padding = {"input_ids": [0], "labels": [IGNORE_INDEX], "sample_ids": [], "lengths": [1]}
    rows = [*rows, *[padding] * ((shape.rows if shape else 1) - len(rows))]
    longest = max(len(r["input_ids"]) for r in rows)
    width = shape.width(longest) if shape else longest
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    position_ids = torch.zeros(len(rows), width, dtype=torch.long)
    document_ids = torch.zeros(len(rows), width, dtype=torch.long)
    document_index = torch.full((len(rows), width), -1, dtype=torch.long)  # the sample in the batch; -1: padding
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    real_tokens = documents = 0
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        input_ids[i, :n] = torch.tensor(r["input_ids"])
        start = 0
        for document, length in enumerate(r["lengths"]):
            position_ids[i, start : start + length] = torch.arange(length)
            document_ids[i, start : start + length] = document
            labels[i, start : start + length - 1] = torch.tensor(r["labels"][start + 1 : start + length])
            if r["sample_ids"]:
                document_index[i, start : start + length] = documents
                documents += 1
            start += length
        # Padding continues the last sample's positions: one causal block, never a token's context.
        position_ids[i, n:] = torch.arange(position_ids[i, n - 1] + 1, position_ids[i, n - 1] + 1 + width - n)
        document_ids[i, n:] = len(r["lengths"]) - 1
        real_tokens += n if r["sample_ids"] else 0
    sample_ids = [sid for r in rows for sid in r["sample_ids"]]
    real = [r for r in rows if r["sample_ids"]]
    return {"input_ids": input_ids, "position_ids": position_ids, "labels": labels, "sample_ids": sample_ids,
            "document_ids": document_ids, "document_index": document_index, "documents": documents,
            "label_tokens": int((labels != IGNORE_INDEX).sum()), "tokens": real_tokens,
            # Attention's cost: each sample attends within itself (training.model.flops.attention_flops).
            "squared_lengths": sum(n * n for r in real for n in r["lengths"])}


def collate_pairs(rows: list[dict], shape: BatchShape | None = None) -> dict:
    """A DPO micro-batch: the chosen sequences of its pairs, then the rejected ones, then any padding
    rows, as one padded batch (`pairs` says where the halves meet; `shape.rows` counts sequences)."""
    sequences = [{"input_ids": r[f"{side}_input_ids"], "labels": r[f"{side}_labels"],
                  "sample_ids": r["sample_ids"] if side == "chosen" else [], "lengths": [len(r[f"{side}_input_ids"])]}
                 for side in ("chosen", "rejected") for r in rows]
    return {**collate(sequences, shape), "pairs": len(rows)}
