"""How a model's files name and split its tensors, read from transformers' own conversion mapping.

Checkpoints on the Hub, and what `save_pretrained` writes, keep some tensors in another layout than
the model holds in memory: one tensor per expert (`mlp.experts.3.gate_proj.weight`) where the model
fuses them (`mlp.experts.gate_up_proj`: [experts, gate rows + up rows, hidden]), or another prefix
(Nemotron-H's `backbone.`). transformers says how for each family (`conversion_mapping`); here that
is read (1) to find, for each tensor the model holds, the file tensors it is made of, so that each
rank reads only the rows of its own shard, and (2) to write an export in the files' layout.
"""

from __future__ import annotations

import re
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass

import torch

from training.contract.errors import ConfigError


@dataclass(frozen=True)
class ExpertPieces:
    """A fused tensor [experts, parts x rows, columns] stored as one [rows, columns] tensor per
    expert and part (gate and up), as transformers' MergeModulelist(dim=0) + Concatenate(dim=1) fuse them."""

    keys: tuple[tuple[str, ...], ...]  # keys[expert][part]


def _transforms(model_type: str) -> list:
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    return list(get_checkpoint_conversion_mapping(model_type) or [])


def _fuses_experts(converter) -> bool:
    from transformers.core_model_loading import Concatenate, MergeModulelist

    ops = [(type(op), getattr(op, "dim", None)) for op in converter.operations]
    return ops in ([(MergeModulelist, 0)], [(MergeModulelist, 0), (Concatenate, 1)])


def file_layout(model_type: str, file_keys) -> tuple[dict[str, str], dict[str, ExpertPieces]]:
    """For the tensors in a model's files: the model's name -> its file key where it is stored whole,
    and the model's name -> its pieces where experts are stored one by one."""
    from transformers.core_model_loading import WeightConverter

    transforms = _transforms(model_type)
    whole, pieces = {}, defaultdict(dict)
    for key in file_keys:
        name, piece = key, None
        for transform in transforms:
            renamed, pattern = transform.rename_source_key(name)
            if pattern is None:
                continue
            if isinstance(transform, WeightConverter):
                if not _fuses_experts(transform):
                    raise ConfigError(f"model_type {model_type} stores {key} in a layout the trainer cannot read shard by "
                                      f"shard ({transform.operations}): re-save the model with save_pretrained")
                expert = re.search(re.escape(pattern).replace(r"\*", r"(\d+)"), name)
                piece = (int(expert.group(1)), transform.source_patterns.index(pattern))
            name = renamed
        if piece is None:
            whole[name] = key
        else:
            pieces[name][piece] = key
    fused = {}
    for name, found in pieces.items():
        experts, parts = (1 + max(index[i] for index in found) for i in (0, 1))
        fused[name] = ExpertPieces(tuple(tuple(found[(e, p)] for p in range(parts)) for e in range(experts)))
    return whole, fused


def read_expert_pieces(local: torch.Tensor, where: tuple[slice, ...], pieces: ExpertPieces, files: dict[str, str]) -> None:
    """Fill this rank's part of a fused expert tensor (`local`, at `where` in the full tensor) from
    the per-expert file tensors, reading only the experts, rows and columns it spans."""
    from safetensors import safe_open

    with ExitStack() as stack, torch.no_grad():
        opened = {}
        for e in range(where[0].start, where[0].stop):
            for part, key in enumerate(pieces.keys[e]):
                if files[key] not in opened:
                    opened[files[key]] = stack.enter_context(safe_open(files[key], "pt"))
                stored = opened[files[key]].get_slice(key)
                rows = stored.get_shape()[0]
                lo, hi = max(where[1].start, part * rows), min(where[1].stop, (part + 1) * rows)
                if lo < hi:
                    local[e - where[0].start, lo - where[1].start:hi - where[1].start] = \
                        stored[lo - part * rows:hi - part * rows, where[2]]


def to_file_layout(base_model: torch.nn.Module, name: str, tensor: torch.Tensor):
    """The file tensors one of the model's tensors is saved as (transformers' reverse conversion:
    fused experts split one per expert, prefixes as the family's files have them)."""
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(base_model, {name: tensor}).items()


def file_tensors(model: torch.nn.Module, merge_adapters: bool):
    """(name, full tensor) of the trained model as its files hold them (what save_pretrained writes
    and an inference engine's weight loader reads), one gathered tensor at a time; with
    `merge_adapters` LoRA's adapters folded into their base weights."""
    from training.model.lora import merged_tensors

    for name, tensor in merged_tensors(model, merge=merge_adapters):
        yield from to_file_layout(model.model, name, tensor)
