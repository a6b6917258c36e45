"""The config as run: what a start resolves from the data, the tokenizer and the device into a new
config object (the loaded one is never changed), and what the trainer and `python -m training.export`
read back from the run's job_config.yaml."""

from __future__ import annotations

from dataclasses import replace

from training.contract.batching import resolve_schedule
from training.contract.config import JobConfig
from training.model.attention import CAUSAL_SDPA


def as_run(cfg: JobConfig, rows: int, vocab_size: int, special_tokens: dict[str, int | None],
           on_gpu: bool = True) -> JobConfig:
    """The config as run, a new object: the schedule resolved from the data (max_epochs, warmup
    ratio -> steps), an inline architecture's vocabulary and pad/bos/eos ids taken from the
    tokenizer where the recipe leaves them out (a family's defaults name ids of its own vocabulary),
    off GPU torch's sdpa for flex attention, which has no backward on CPU (a GPU recipe's local
    smoke run: packed rows still attend per sample), and for rows of one sample each (no packing)
    sdpa without a mask (training.model.attention.CAUSAL_SDPA)."""
    tc = cfg.training_config
    mc = tc.model_config
    if mc.architecture is not None:
        mc = replace(mc, architecture={"vocab_size": vocab_size, **special_tokens, **mc.architecture})
    if not on_gpu and mc.attn_implementation == "flex_attention":
        mc = replace(mc, attn_implementation=None)
    if not tc.datasets.packing and mc.attn_implementation in (None, "sdpa"):
        mc = replace(mc, attn_implementation=CAUSAL_SDPA)
    return replace(cfg, training_config=replace(tc, training_args=resolve_schedule(tc.training_args, rows),
                                                model_config=mc))
