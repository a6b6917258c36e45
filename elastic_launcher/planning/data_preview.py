"""The dry run's look at local training data, before anything is submitted: a sample of rows read
as the trainer will read them (format, fields, conversations), their token lengths against
max_len, and the tokenizer's chat template. Hub datasets are left to the trainer.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from elastic_launcher import ROOT
from training.contract.config import DatasetConfig, ModelConfig
from training.contract.data_files import READERS, json_line, split_files
from training.contract.data_formats import (check_messages, conversation, no_chat_template, no_preference_columns,
                                           plain_text, prompt_and_columns, prompt_format, row_format)
from training.contract.errors import ConfigError

SAMPLE_ROWS = 64


@dataclass(frozen=True)
class DataPreview:
    path: str
    format: str
    sampled: int
    longest_tokens: int | None  # of the sampled rows' text (the template adds a few per turn); None: no tokenizer
    over_max_len: int  # prompts (GRPO): over method_args.max_prompt_length, which the trainer leaves out
    columns: tuple[str, ...] = ()  # what a row gives its reward functions (prompts)
    limit_key: str = "datasets.max_len"
    examples: tuple = ()  # (where, prompt, columns) of the sampled prompt rows: what a judge's template must render

    def describe(self, max_len: int) -> str:
        line = f"data: {self.path} read as {self.format} rows ({self.sampled} sampled"
        if self.longest_tokens is None:
            return line + ")"
        line += f", the longest ~{self.longest_tokens:,} tokens"
        if self.over_max_len:
            effect = "which leaves them out" if self.format in ("prompt", "verl", "question") else "which cuts them"
            line += f"; {self.over_max_len} of them longer than {self.limit_key}={max_len}, {effect}"
        return line + ")"


def _files(path: Path, split: str) -> list[Path]:
    files = split_files(path, split) if path.is_dir() else [str(path)]  # the trainer's split naming
    return sorted(Path(f) for f in files if Path(f).suffix in READERS)


def _sample(files: list[Path]) -> list[tuple[str, dict]]:
    """Up to SAMPLE_ROWS rows with where each is (file and line, or row number)."""
    rows: list[tuple[str, dict]] = []
    for f in files:
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            batch = next(pq.ParquetFile(f).iter_batches(batch_size=SAMPLE_ROWS), None)
            rows += [(f"row {i} of {f}", r) for i, r in enumerate(batch.to_pylist() if batch else [])]
        elif f.suffix == ".csv":
            with open(f, newline="") as handle:
                rows += [(f"{f} line {i + 2}", r) for i, r in zip(range(SAMPLE_ROWS), csv.DictReader(handle))]
        elif f.suffix == ".json" and (text := f.read_text()).lstrip()[:1] == "[":
            rows += [(f"row {i} of {f}", r) for i, r in enumerate(json.loads(text)[:SAMPLE_ROWS])]
        else:
            with open(f, "rb") as handle:
                for number, raw in enumerate(handle, 1):
                    if len(rows) >= SAMPLE_ROWS:
                        break
                    if raw.strip():
                        row, problem = json_line(raw)
                        if problem:
                            raise ConfigError(f"bad training row at {f} line {number}: {problem}: fix or remove the row")
                        rows.append((f"{f} line {number}", row))
        if len(rows) >= SAMPLE_ROWS:
            break
    return rows[:SAMPLE_ROWS]


def _local_tokenizer(model: ModelConfig) -> Path | None:
    names = [n for n in (model.tokenizer_name_or_path, model.model_name_or_path) if n]
    return next((base / n for n in names[:1] for base in (Path.cwd(), ROOT) if (base / n / "tokenizer.json").is_file()),
                None)


def _template(local: Path) -> tuple[str | None, dict]:
    """The tokenizer directory's chat template (None: it has none) and its tokenizer_config."""
    config = json.loads((local / "tokenizer_config.json").read_text()) if (local / "tokenizer_config.json").is_file() \
        else {}
    if (local / "chat_template.jinja").is_file():
        return (local / "chat_template.jinja").read_text(), config
    return config.get("chat_template") if isinstance(config.get("chat_template"), str) else None, config


def _tokenizer(model: ModelConfig):
    """The fast tokenizer of a local model or tokenizer directory (tokenizers, no transformers) and
    whether it has a chat template; (None, True) where the tokenizer is not local."""
    local = _local_tokenizer(model)
    if local is None:
        return None, True
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(local / "tokenizer.json")), _template(local)[0] is not None


def agent_tokenizer(model: ModelConfig, ds: DatasetConfig):
    """The local tokenizer with the recipe's chat template, as transformers renders it (an agent's tools
    and replies go through it; transformers' fast tokenizer, without torch); None where it is not local."""
    local = _local_tokenizer(model)
    if local is None:
        return None
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(local))
    tokenizer.chat_template = _recipe_template(ds, tokenizer.chat_template)
    return tokenizer


def _recipe_template(ds: DatasetConfig, default: str | None) -> str | None:
    """The recipe's chat template (its text, or a file holding it, as the trainer reads it), else `default`."""
    if not ds.chat_template:
        return default
    given = Path(ds.chat_template)
    return ds.chat_template if "{" in ds.chat_template else given.read_text() if given.is_file() else default


def _rendered(messages: list[dict], template: str, config: dict, tools: list[dict] | None = None) -> str:
    """A prompt as the trainer gives it to the model: the chat template with the generation prompt
    (Jinja, as transformers renders it)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def token(value):  # tokenizer_config names a special token as text or as {"content": ...}
        return value.get("content") if isinstance(value, dict) else value

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent)  # transformers' (no HTML escapes)
    return env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                            bos_token=token(config.get("bos_token")) or "",
                                            eos_token=token(config.get("eos_token")) or "")


def preview(ds: DatasetConfig, model: ModelConfig, data_format: str, prompt_limit: int = 0,
            tools: list[dict] | None = None) -> DataPreview | None:
    """The sample's verdict, or None for data that is not local (a hub id) or a save_to_disk directory.
    A problem the trainer would stop on is raised here, one line, with the row it is in.
    `data_format`: the method's rows (training.contract.methods): chat, pairs or prompts (counted
    against `prompt_limit`, GRPO's max_prompt_length, with an agent's `tools` offered)."""
    path = Path(ds.train_data)
    if not path.exists() or (path / "state.json").exists() or (path / "dataset_dict.json").exists():
        return None
    rows = _sample(_files(path, ds.split))
    if not rows:
        return None
    columns = list(rows[0][1])
    if data_format == "prompts":
        return _prompts(ds, model, rows, columns, prompt_limit, tools)
    if data_format == "pairs":
        if not {"chosen", "rejected"} <= set(columns):
            raise no_preference_columns(ds.train_data, columns)
        fmt = "preference"
    else:
        fmt = row_format(ds.format, columns, ds.messages_key, ds.train_data)
    texts = []
    for where, row in rows:
        try:
            if fmt == "text":
                texts.append(plain_text(row))
            elif fmt != "preference":
                turns = conversation(row, fmt, ds.messages_key)
                check_messages(turns)
                texts.append("\n".join(t["content"] for t in turns))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"bad training row at {where}: {e}: fix or remove the row") from None
    tokenizer, has_template = _tokenizer(model)
    if not has_template and fmt != "text" and not ds.chat_template:
        raise no_chat_template(model.tokenizer_name_or_path or model.model_name_or_path)
    lengths = [len(tokenizer.encode(t).ids) for t in texts] if tokenizer and texts else []
    return DataPreview(ds.train_data, fmt, len(rows), max(lengths) if lengths else None,
                       sum(n > ds.max_len for n in lengths))


def _prompts(ds: DatasetConfig, model: ModelConfig, rows: list[tuple[str, dict]], columns: list[str],
             limit: int, tools: list[dict] | None) -> DataPreview:
    """GRPO's prompt rows: their format, the columns their reward functions get, their lengths."""
    fmt = prompt_format(ds.format, columns, ds.train_data)
    texts, given, examples = [], set(), []
    for where, row in rows:
        try:
            prompt, extra = prompt_and_columns(row, fmt)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"bad training row at {where}: {e}: fix or remove the row") from None
        texts.append(prompt)
        given |= set(extra)
        examples.append((where, prompt, extra))
    tokenizer, has_template = _tokenizer(model)
    if not has_template and not ds.chat_template and any(not isinstance(t, str) for t in texts):
        raise no_chat_template(model.tokenizer_name_or_path or model.model_name_or_path)
    template, config = _template(_local_tokenizer(model)) if tokenizer else (None, {})
    template = _recipe_template(ds, template)
    lengths = [len(tokenizer.encode(t if isinstance(t, str) else _rendered(t, template, config, tools),
                                    add_special_tokens=isinstance(t, str)).ids) for t in texts] if tokenizer else []
    return DataPreview(ds.train_data, fmt, len(rows), max(lengths) if lengths else None,
                       sum(n > limit for n in lengths), tuple(sorted(given)), "method_args.max_prompt_length",
                       tuple(examples))
