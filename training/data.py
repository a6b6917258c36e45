"""Training data: chat samples (SFT) or preference pairs (DPO) -> token ids with prompt tokens masked
out of the labels; or prompts (GRPO) -> their token ids, with the columns their rewards read. Split
into training and validation rows.

Tokenization runs once per dataset/tokenizer/settings and is cached under the run directory. One
process per node builds the cache while the others poll the file system, so a long tokenization
never trips a collective timeout.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from training.batches import IGNORE_INDEX, pack
from training.cached_rows import CachedRows
from training.chat_tokens import preference_conversations, tokenize_chat
from training.contract.config import DatasetConfig, ModelConfig
from training.contract.data_files import READERS, held_out_split, is_local, json_line, split_files
from training.contract.data_formats import (check_messages, conversation, no_chat_template,
                                           no_preference_columns, plain_text, prompt_and_columns, prompt_format,
                                           row_format)
from training.contract.errors import ConfigError

_READY = "READY"
_STATS = "stats.json"
_FORMAT = 5  # bump when the cached rows or statistics change shape
SPLITS = ("train", "validation")


def _source_identity(path: str) -> str:
    """What identifies the raw data: local files by name, size and mtime; hub ids by name."""
    p = Path(path)
    if not p.exists():
        return path
    files = sorted(p.rglob("*")) if p.is_dir() else [p]
    return ";".join(f"{f}:{f.stat().st_size}:{int(f.stat().st_mtime)}" for f in files if f.is_file())


def _is_template_text(chat_template: str) -> bool:
    """datasets.chat_template holds Jinja text (it has a tag) or else names a file."""
    return "{" in chat_template


def _template_identity(chat_template: str) -> str:
    """A chat template given as Jinja text is itself; one given as a file is that file's identity."""
    return chat_template if _is_template_text(chat_template) else _source_identity(chat_template)


def cache_key(cfg: DatasetConfig, tokenizer_name: str, data_format: str, seed: int, prompt_limit: int | None = None,
              tools: list[dict] | None = None) -> str:
    text = json.dumps([_source_identity(cfg.train_data), cfg.split, cfg.format, cfg.messages_key, cfg.max_len, cfg.packing,
                       cfg.train_val_split_ratio, cfg.enable_thinking, seed, data_format, _source_identity(tokenizer_name),
                       cfg.chat_template and _template_identity(cfg.chat_template), _FORMAT, prompt_limit]
                      + ([tools] if tools else []))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _data_files(cfg: DatasetConfig) -> list[str] | None:
    """The local files behind train_data, or None for a hub dataset id."""
    path = Path(cfg.train_data)
    key = "training_config.datasets.train_data"
    if not is_local(cfg.train_data):
        return None
    files = split_files(path, cfg.split) if path.is_dir() else [str(path)]
    files = sorted(f for f in files if Path(f).suffix in READERS)
    if not files:
        raise ConfigError(f"{key}={cfg.train_data!r} has no {'/'.join(READERS)} files")
    if len({READERS[Path(f).suffix] for f in files}) > 1:
        raise ConfigError(f"{key}={cfg.train_data!r} mixes file types ({', '.join(sorted({Path(f).suffix for f in files}))}):"
                          f" keep one type per split")
    if all(Path(f).stat().st_size == 0 for f in files):
        raise ConfigError(f"{key}={cfg.train_data!r} is empty: it holds no rows")
    return files


def _saved_to_disk(path: Path, split: str):
    """The rows of a directory written by datasets' `save_to_disk` (a Dataset, or a DatasetDict whose
    `split` is read), or None for any other path."""
    import datasets

    if not path.is_dir() or not ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
        return None
    saved = datasets.load_from_disk(str(path))
    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise ConfigError(f"training_config.datasets.split={split!r} is not a split of train_data={str(path)!r} "
                              f"(a saved DatasetDict of {', '.join(sorted(saved))}): set training_config.datasets.split "
                              f"to one of them")
        return saved[split]
    return saved


def _load_raw(cfg: DatasetConfig):
    import datasets

    datasets.disable_progress_bars()
    saved = _saved_to_disk(Path(cfg.train_data), cfg.split)
    if saved is not None:
        return saved, None
    files = _data_files(cfg)
    key = f"training_config.datasets.train_data={cfg.train_data!r}"
    if files is None:
        try:
            return datasets.load_dataset(cfg.train_data, cfg.subset, split=cfg.split), None
        except Exception as e:  # noqa: BLE001 - offline, unknown id, no access: all one line
            raise ConfigError(f"{key} is neither a local path nor a dataset the hub serves here "
                              f"({type(e).__name__}: {_first_line(e)}): check the path or the id and network") from None
    kind = READERS[Path(files[0]).suffix]
    options = {}
    if kind == "csv":  # every cell is text ("8" stays an answer, not a number; an empty cell stays "")
        with open(files[0], newline="") as f:
            header = next(csv.reader(f), [])
        options = {"features": datasets.Features({name: datasets.Value("string") for name in header}),
                   "keep_default_na": False}
    try:
        return datasets.load_dataset(kind, data_files=files, split="train", **options), files
    except Exception as e:  # noqa: BLE001 - the reader's errors name no row: find it
        raise ConfigError(f"{key}: {_unreadable_row(files) or _first_line(e)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _unreadable_row(files: list[str]) -> str | None:
    """The first JSONL line that is not UTF-8 or not a JSON object, as `bad training row at FILE line N: why`."""
    for name in files:
        if not name.endswith((".jsonl", ".json")):
            continue
        with open(name, "rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                _, problem = json_line(raw)
                if problem:
                    return f"bad training row at {name} line {number}: {problem}: fix or remove the row"
    return None


def _where(files: list[str] | None, index: int, train_data: str) -> str:
    """A row's place a person can find: file and line for JSONL, else the row index."""
    left = index
    for name in files or []:
        if not name.endswith((".jsonl", ".json")):
            break
        with open(name) as f:
            lines = [n for n, line in enumerate(f, 1) if line.strip()]
        if left < len(lines):
            return f"{name} line {lines[left]}"
        left -= len(lines)
    return f"row {index} of {train_data}"


def _packed(ds, max_len: int):
    """Concatenate the rows of each packed row; `lengths` keeps the sample boundaries."""
    rows = ds.to_dict()
    groups = pack([len(ids) for ids in rows["input_ids"]], max_len)
    out = {"input_ids": [], "labels": [], "sample_ids": [], "lengths": []}
    for group in groups:
        out["input_ids"].append([t for i in group for t in rows["input_ids"][i]])
        out["labels"].append([t for i in group for t in rows["labels"][i]])
        out["sample_ids"].append([s for i in group for s in rows["sample_ids"][i]])
        out["lengths"].append([len(rows["input_ids"][i]) for i in group])
    import datasets

    return datasets.Dataset.from_dict(out)


DROP_REASONS = {"no_assistant_tokens": "no assistant tokens",
                "truncated_away": "no assistant tokens within max_len (raise datasets.max_len)",
                "overlong_prompt": "a prompt longer than method_args.max_prompt_length"}


def _drop_detail(dropped: dict[str, int]) -> str:
    return ", ".join(f"{n} with {DROP_REASONS[k]}" for k, n in dropped.items())


def _tokenize_kept(messages, cfg: DatasetConfig, tokenizer, tools: list[dict] | None = None) -> tuple[dict, str, int]:
    """A checked conversation tokenized and cut to max_len, with the reason to drop it ("" to keep it)
    and, where the cut took answer tokens (the answer then trains without its end), its whole length (else 0)."""
    check_messages(messages)
    template_kwargs = cfg.template_kwargs
    full = tokenize_chat(messages, tokenizer, 1 << 62, tools, **template_kwargs)
    kept = {k: v[: cfg.max_len] for k, v in full.items()}
    cut_answer = any(t != IGNORE_INDEX for t in full["labels"][cfg.max_len:])
    return kept, _drop_reason(kept["labels"], full["labels"]), len(full["input_ids"]) if cut_answer else 0


def _encode_sft(row: dict, cfg: DatasetConfig, tokenizer, fmt: str) -> tuple[dict, str, int]:
    tools = row.get("tools")  # TRL's column of an agent's transcripts: a list of schemas, or its JSON
    tools = json.loads(tools) if isinstance(tools, str) else tools
    kept, drop, cut = _tokenize_kept(conversation(row, fmt, cfg.messages_key), cfg, tokenizer, tools or None)
    return {**kept, "lengths": [len(kept["input_ids"])]}, drop, cut


def _encode_text(row: dict, cfg: DatasetConfig, tokenizer, fmt: str) -> tuple[dict, str, int]:
    """Plain text, every token trained, closed by the end-of-sequence token so documents stay apart
    when packed; longer than max_len it is cut into pieces later, not truncated."""
    ids = tokenizer(plain_text(row))["input_ids"]
    if tokenizer.eos_token_id is not None and ids[-1:] != [tokenizer.eos_token_id]:
        ids.append(tokenizer.eos_token_id)
    return {"input_ids": ids, "labels": list(ids), "lengths": [len(ids)]}, "", 0


def _pieces(batch: dict, max_len: int) -> dict:
    """Text rows cut into max_len pieces (each a sample of its own row index)."""
    out = {k: [] for k in batch}
    for i, ids in enumerate(batch["input_ids"]):
        for start in range(0, len(ids), max_len):
            for k in batch:
                out[k].append(batch[k][i])
            out["input_ids"][-1] = ids[start:start + max_len]
            out["labels"][-1] = batch["labels"][i][start:start + max_len]
            out["lengths"][-1] = [len(out["input_ids"][-1])]
    return out


def _encode_prompt(row: dict, cfg: DatasetConfig, tokenizer, fmt: str, limit: int,
                   tools: list[dict] | None = None) -> tuple[dict, str, int]:
    """A prompt's token ids (chat messages rendered with the generation prompt, and an agent's `tools`
    offered; text as it is) and, as JSON, the prompt itself and the row's other columns (any shapes:
    the reward functions get them back as they were). Longer than `limit` it is dropped (verl's
    filter_overlong_prompts)."""
    prompt, columns = prompt_and_columns(row, fmt)
    if isinstance(prompt, str):
        ids = tokenizer(prompt)["input_ids"]
    else:
        template_kwargs = cfg.template_kwargs
        ids = tokenizer.apply_chat_template(prompt, tools=tools, tokenize=True, add_generation_prompt=True,
                                            return_dict=True, **template_kwargs)["input_ids"]
    return ({"prompt_ids": ids, "prompt": json.dumps(prompt), "columns": json.dumps(columns, default=str)},
            "overlong_prompt" if len(ids) > limit else "", 0)


def _encode_pair(row: dict, cfg: DatasetConfig, tokenizer, fmt: str) -> tuple[dict, str, int]:
    out, reasons, cuts = {}, [], []
    for side, messages in zip(("chosen", "rejected"), preference_conversations(row)):
        kept, drop, cut = _tokenize_kept(messages, cfg, tokenizer)
        out[f"{side}_input_ids"], out[f"{side}_labels"] = kept["input_ids"], kept["labels"]
        reasons.append(drop)
        cuts.append(cut)
    return out, next((r for r in reasons if r), ""), max(cuts)


def _drop_reason(kept_labels: list[int], all_labels: list[int]) -> str:
    if any(t != IGNORE_INDEX for t in kept_labels):
        return ""
    return "truncated_away" if any(t != IGNORE_INDEX for t in all_labels) else "no_assistant_tokens"


def validation_rows(rows: int, ratio: float, seed: int) -> set[int]:
    """The rows held out for validation: a seeded choice of the raw rows, so the split is the same at
    every size and on every restart (and does not depend on tokenization or packing)."""
    held_out = rows - round(ratio * rows)
    return set(random.Random(seed).sample(range(rows), held_out))


def build_dataset(cfg: DatasetConfig, tokenizer, data_format: str = "chat", seed: int = 0, prompt_limit: int | None = None,
                  tools: list[dict] | None = None):
    """(training rows, validation rows or None, statistics) of `data_format` ("chat": one
    conversation per row; "pairs": a prompt with chosen and rejected answers; "prompts": a prompt
    of at most `prompt_limit` tokens). A malformed row stops the build with its file and line."""
    raw, files = _load_raw(cfg)
    if len(raw) == 0:
        raise ConfigError(f"training_config.datasets.train_data={cfg.train_data!r} holds no rows")
    if data_format == "pairs" and not {"chosen", "rejected"} <= set(raw.column_names):
        raise no_preference_columns(cfg.train_data, raw.column_names)
    if data_format == "prompts":
        fmt = prompt_format(cfg.format, raw.column_names, cfg.train_data)
        encode_row = functools.partial(_encode_prompt, limit=prompt_limit, tools=tools)
    else:
        fmt = "pairs" if data_format == "pairs" else row_format(cfg.format, raw.column_names, cfg.messages_key,
                                                               cfg.train_data)
        encode_row = {"pairs": _encode_pair, "text": _encode_text}.get(fmt, _encode_sft)

    def encoded(rows, files):
        def encode(row, idx):
            try:
                out, drop, cut = encode_row(row, cfg, tokenizer, fmt)
            except Exception as e:  # noqa: BLE001 - any failure here is this row's fault
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(f"bad training row at {_where(files, idx, cfg.train_data)}: {reason}: fix or remove "
                                  f"the row") from None
            return {**out, "sample_ids": [idx], "drop": drop, "cut": 0 if drop else cut}

        ds = rows.map(encode, with_indices=True, remove_columns=rows.column_names, desc="tokenizing")
        if fmt == "text":
            ds = ds.map(_pieces, batched=True, fn_kwargs={"max_len": cfg.max_len}, desc="cutting into max_len pieces")
        return ds

    ds = encoded(raw, files)
    reasons = ds["drop"]
    dropped = {k: reasons.count(k) for k in DROP_REASONS if reasons.count(k)}
    cut_lengths = [n for n in ds["cut"] if n]
    held_out = validation_rows(len(raw), cfg.train_val_split_ratio, seed)
    kept = ds.filter(lambda row: not row["drop"]).remove_columns(["drop", "cut"])
    train = kept.filter(lambda row: row["sample_ids"][0] not in held_out)
    val = kept.filter(lambda row: row["sample_ids"][0] in held_out) if held_out else None
    validation_split = None if held_out else held_out_split(cfg)
    if validation_split:  # no rows carved out: the source's own held-out split validates
        val = encoded(*_load_raw(replace(cfg, split=validation_split))).filter(
            lambda row: not row["drop"]).remove_columns(["drop", "cut"])
    if len(train) == 0:
        raise ConfigError(f"training_config.datasets.train_data={cfg.train_data!r}: all {len(raw)} rows were "
                          f"dropped ({_drop_detail(dropped)}) or held out for validation: nothing to train on")
    stats = {"format": fmt, "rows": len(raw), "kept": len(train), "validation_rows": len(val) if val else 0,
             "validation_split": validation_split, "dropped": dropped,
             "truncated": len(cut_lengths), "max_len": cfg.max_len, "longest_truncated": max(cut_lengths, default=0)}
    if cfg.packing:
        train = _packed(train, cfg.max_len)
        stats["packed_rows"] = len(train)
        stats["packing_fill"] = sum(map(sum, train["lengths"])) / (len(train) * cfg.max_len)
    return train, val, stats


TRUNCATED_WARN_SHARE = 0.05  # below it, cut rows are counted in the data record without a warning


def describe_drops(stats: dict) -> str | None:
    """What the data lost on the way in, in one line (None when nothing worth a warning): rows dropped,
    and kept rows whose answer was cut at max_len (trained without the rest of the answer or its end
    of turn) once they pass TRUNCATED_WARN_SHARE of the rows."""
    parts = []
    if stats.get("dropped"):
        parts.append(f"dropped {sum(stats['dropped'].values())} of {stats['rows']} training rows: "
                     f"{_drop_detail(stats['dropped'])}")
    if stats.get("truncated", 0) > TRUNCATED_WARN_SHARE * stats["rows"]:
        parts.append(f"{stats['truncated']} of {stats['rows']} rows ({stats['truncated'] / stats['rows']:.0%}) are longer "
                     f"than datasets.max_len={stats['max_len']} and train on a cut answer without its end of turn: "
                     f"datasets.max_len={stats['longest_truncated']} keeps them whole")
    return "; ".join(parts) or None


def load_or_build(cfg: DatasetConfig, tokenizer, tokenizer_name: str, cache_root: Path, builder: bool,
                  data_format: str = "chat", seed: int = 0, poll_timeout: float = 24 * 3600,
                  prompt_limit: int | None = None, tools: list[dict] | None = None):
    """(training rows, validation rows or None, statistics) from the cache; `builder` (one process
    per node) builds it if missing."""
    target = Path(cache_root) / cache_key(cfg, tokenizer_name, data_format, seed, prompt_limit, tools)
    if builder and not (target / _READY).exists():
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        try:
            *splits, stats = build_dataset(cfg, tokenizer, data_format, seed, prompt_limit, tools)
            for name, split in zip(SPLITS, splits):
                if split is not None:
                    split.save_to_disk(str(tmp / name))
            (tmp / _STATS).write_text(json.dumps(stats))
            (tmp / _READY).touch()
            os.replace(tmp, target)
        except OSError:
            if not (target / _READY).exists():
                raise
        finally:  # another node's builder may have won the race with an identical result
            shutil.rmtree(tmp, ignore_errors=True)
    deadline = time.monotonic() + poll_timeout
    while not (target / _READY).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"tokenized dataset {target} did not appear within {poll_timeout:.0f}s")
        time.sleep(0.5)
    train, val = (CachedRows(target / name) if (target / name).exists() else None for name in SPLITS)
    return train, val, json.loads((target / _STATS).read_text())


@dataclass(frozen=True)
class TrainingData:
    """The tokenized rows a run trains and validates on, and what building them counted."""

    train: CachedRows
    validation: CachedRows | None
    vocab_size: int  # the tokenizer's: an inline architecture takes it
    special_tokens: dict[str, int | None]  # pad/bos/eos token ids of the tokenizer, as config keys
    stats: dict
    tokenizer: object = None  # GRPO decodes its completions with it


def with_chat_template(tokenizer, tokenizer_name: str, chat_template: str | None) -> None:
    """The tokenizer with the recipe's chat template where one is given (its text, or a file holding
    it); without either, a tokenizer that has none is refused in one line (every row is rendered by it)."""
    if chat_template and _is_template_text(chat_template):
        tokenizer.chat_template = chat_template
    elif chat_template:
        if not Path(chat_template).is_file():
            raise ConfigError(f"training_config.datasets.chat_template={chat_template!r} is neither Jinja text nor a "
                              f"file here: give the template's text or the path of a file the pods can read")
        tokenizer.chat_template = Path(chat_template).read_text()
    if not getattr(tokenizer, "chat_template", None):
        raise no_chat_template(tokenizer_name)


def _row_format(cfg: DatasetConfig) -> str:
    return row_format(cfg.format, _load_raw(cfg)[0].column_names, cfg.messages_key, cfg.train_data)


def build_data(section: DatasetConfig, model: ModelConfig, source: str | None, cache_root: Path, builder: bool,
               data_format: str, seed: int, prompt_limit: int | None = None, tools: list[dict] | None = None) -> TrainingData:
    """The run's data from its `datasets` section, tokenized by the model's tokenizer (its own files,
    `source`, where the model has them); `builder` (one process per node) tokenizes into the cache."""
    from transformers import AutoTokenizer

    tokenizer_name = model.tokenizer_name_or_path or model.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(model.tokenizer_name_or_path or source or model.model_name_or_path)
    try:
        with_chat_template(tokenizer, tokenizer_name, section.chat_template)
    except ConfigError:
        if data_format != "chat" or _row_format(section) != "text":  # plain text is tokenized without a template
            raise
    train, validation, stats = load_or_build(section, tokenizer, tokenizer_name, cache_root, builder=builder,
                                             data_format=data_format, seed=seed, prompt_limit=prompt_limit, tools=tools)
    special = {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("pad", "bos", "eos")}
    return TrainingData(train, validation, len(tokenizer), special, stats, tokenizer)
