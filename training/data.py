"""Supervised fine-tuning data: chat samples -> token ids with prompt tokens masked out of the labels.

Tokenization runs once per dataset/tokenizer/settings and is cached under the run directory. One
process per node builds the cache while the others poll the file system, so a long tokenization
never trips a collective timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import torch

from training.config import ConfigError, DatasetConfig

IGNORE_INDEX = -100
_READY = "READY"


def _source_identity(path: str) -> str:
    """What identifies the raw data: local files by name, size and mtime; hub ids by name."""
    p = Path(path)
    if not p.exists():
        return path
    files = sorted(p.rglob("*")) if p.is_dir() else [p]
    return ";".join(f"{f}:{f.stat().st_size}:{int(f.stat().st_mtime)}" for f in files if f.is_file())


def cache_key(cfg: DatasetConfig, tokenizer_name: str) -> str:
    text = json.dumps([_source_identity(cfg.train_data), cfg.split, cfg.messages_key, cfg.max_len, cfg.packing,
                       _source_identity(tokenizer_name)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _load_raw(cfg: DatasetConfig):
    import datasets

    datasets.disable_progress_bars()
    path = Path(cfg.train_data)
    if path.exists():
        files = sorted(str(f) for f in (path.rglob("*") if path.is_dir() else [path])
                       if f.suffix in (".jsonl", ".json", ".parquet"))
        if not files:
            raise ConfigError(f"training_config.datasets.train_data={cfg.train_data!r} has no .jsonl/.json/.parquet files")
        kind = "parquet" if files[0].endswith(".parquet") else "json"
        return datasets.load_dataset(kind, data_files=files, split="train")
    return datasets.load_dataset(cfg.train_data, split=cfg.split)


def tokenize_chat(messages: list[dict], tokenizer, max_len: int) -> dict:
    """input_ids of the whole conversation; labels equal to input_ids on assistant turns and
    IGNORE_INDEX elsewhere, found by rendering the chat template up to each turn."""

    def render(turns, generation_prompt):
        return tokenizer.apply_chat_template(turns, tokenize=True, add_generation_prompt=generation_prompt,
                                             return_dict=True)["input_ids"]

    input_ids = render(messages, False)
    labels = [IGNORE_INDEX] * len(input_ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start, end = len(render(messages[:i], True)), len(render(messages[: i + 1], False))
        labels[start:end] = input_ids[start:end]
    return {"input_ids": input_ids[:max_len], "labels": labels[:max_len]}


def _pack(rows: dict, max_len: int) -> dict:
    """Greedy packing in dataset order (deterministic, so the packed dataset is the same on every
    restart and the sampler can index it). A packed row lists the sample ids it holds."""
    out = {"input_ids": [], "labels": [], "sample_ids": []}
    cur = {"input_ids": [], "labels": [], "sample_ids": []}
    for ids, labels, sid in zip(rows["input_ids"], rows["labels"], rows["sample_ids"]):
        if cur["input_ids"] and len(cur["input_ids"]) + len(ids) > max_len:
            for k in out:
                out[k].append(cur[k])
            cur = {"input_ids": [], "labels": [], "sample_ids": []}
        cur["input_ids"] += ids
        cur["labels"] += labels
        cur["sample_ids"] += sid
    if cur["input_ids"]:
        for k in out:
            out[k].append(cur[k])
    return out


def build_dataset(cfg: DatasetConfig, tokenizer):
    raw = _load_raw(cfg)
    if cfg.messages_key not in raw.column_names:
        raise ConfigError(f"training_config.datasets.messages_key={cfg.messages_key!r} is not a column of "
                          f"{cfg.train_data!r} (columns: {', '.join(raw.column_names)})")

    def encode(row, idx):
        return {**tokenize_chat(row[cfg.messages_key], tokenizer, cfg.max_len), "sample_ids": [idx]}

    ds = raw.map(encode, with_indices=True, remove_columns=raw.column_names, desc="tokenizing")
    ds = ds.filter(lambda row: any(label != IGNORE_INDEX for label in row["labels"]))  # nothing to learn
    if cfg.packing:
        ds = ds.map(lambda rows: _pack(rows, cfg.max_len), batched=True, batch_size=len(ds) or 1)
    return ds


def load_or_build(cfg: DatasetConfig, tokenizer, tokenizer_name: str, cache_root: Path, builder: bool,
                  poll_timeout: float = 24 * 3600):
    """The tokenized dataset from the cache; `builder` (one process per node) builds it if missing."""
    import datasets

    target = Path(cache_root) / cache_key(cfg, tokenizer_name)
    if builder and not (target / _READY).exists():
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        build_dataset(cfg, tokenizer).save_to_disk(str(tmp))
        (tmp / _READY).touch()
        try:
            os.replace(tmp, target)
        except OSError:  # another node's builder won the race with an identical result
            shutil.rmtree(tmp, ignore_errors=True)
    deadline = time.monotonic() + poll_timeout
    while not (target / _READY).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"tokenized dataset {target} did not appear within {poll_timeout:.0f}s")
        time.sleep(0.5)
    return datasets.load_from_disk(str(target))


def collate(rows: list[dict]) -> dict:
    """Right-pad a micro-batch. Labels are shifted here (labels[t] is the target of position t), so
    the loss is a plain token-wise cross entropy. An empty micro-batch (a rank with fewer samples
    than micro-steps) becomes one fully masked token: it keeps collectives aligned and adds nothing."""
    if not rows:
        return {"input_ids": torch.zeros(1, 1, dtype=torch.long), "attention_mask": torch.ones(1, 1, dtype=torch.long),
                "labels": torch.full((1, 1), IGNORE_INDEX), "sample_ids": []}
    width = max(len(r["input_ids"]) for r in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        input_ids[i, :n] = torch.tensor(r["input_ids"])
        attention[i, :n] = 1
        labels[i, : n - 1] = torch.tensor(r["labels"][1:])
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels,
            "sample_ids": [sid for r in rows for sid in r["sample_ids"]]}
