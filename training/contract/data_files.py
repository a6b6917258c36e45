"""Where local training data lives: the files of a split (named as Hugging Face datasets names
them), the held-out split beside it, and one JSONL line read as a row. Shared by the trainer's data
loading and the launcher's dry-run look at the data.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from training.contract.config import DatasetConfig
from training.contract.errors import ConfigError

READERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}  # suffix -> datasets' reader


def is_local(train_data: str) -> bool:
    """Whether `train_data` is a local file or directory, as the trainer reads it; False for a hub
    dataset id (`org/name`) or a URL. A local path that does not exist is one line naming the nearest
    name beside it: a mistyped path fails in a second, not after a round trip to the hub. `data/name`
    is local where ./data is a local directory."""
    path = Path(train_data)
    if path.exists():
        return True
    if "://" in train_data or not (path.is_absolute() or train_data.startswith(".") or path.suffix
                                   or train_data.count("/") != 1 or path.parent.is_dir()):
        return False
    near = difflib.get_close_matches(path.name, [p.name for p in path.parent.glob("*")], n=1) \
        if path.parent.is_dir() else []
    hint = f" (did you mean {str(path.parent / near[0])!r}?)" if near else ""
    raise ConfigError(f"training_config.datasets.train_data={train_data!r} does not exist{hint}: give an existing "
                      f"JSONL/JSON/Parquet/CSV file or directory (relative to {Path.cwd()}) or a hub dataset id "
                      f"such as org/name")


def json_line(raw: bytes) -> tuple[dict | None, str | None]:
    """One JSONL line as (row, None), or (None, what is wrong with it)."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
    except json.JSONDecodeError as e:
        return None, f"invalid JSON ({e.msg} at column {e.colno})"
    return (row, None) if isinstance(row, dict) else (None, f"not a JSON object ({type(row).__name__})")


def splits_of(directory: Path) -> tuple[dict[str, list[str]], bool]:
    """The files of each split of a directory, named as Hugging Face datasets names splits (train*,
    test*/eval*, validation*/dev* files or folders), and whether any file is so named (if none is,
    every file is in `train`)."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    patterns = get_data_patterns(str(directory))
    by_split = {str(name): list(files) for name, files in
                DataFilesDict.from_local_or_remote(patterns, base_path=str(directory)).items()}
    return by_split, not (list(patterns) == ["train"] and patterns["train"] == ["**"])


def split_files(directory: Path, split: str) -> list[str]:
    """The files of a directory's `split`: a `test.jsonl` beside `train.jsonl` is never trained on. A
    directory without split names is one training split, whatever `split` says."""
    by_split, named = splits_of(directory)
    if not named:
        return by_split["train"]
    if split not in by_split:
        raise ConfigError(f"training_config.datasets.split={split!r} is not a split of train_data={str(directory)!r}, "
                          f"whose file names make the splits {', '.join(sorted(by_split))}: set "
                          f"training_config.datasets.split to one of them")
    return by_split[split]


HELD_OUT_SPLITS = ("validation", "test")  # the first one a source has validates when no rows are carved out


def held_out_split(cfg: DatasetConfig) -> str | None:
    """The split of a local source kept apart from its training split (its validation, else its test
    split): a directory's split files or a saved DatasetDict's splits. None for a single file, a hub id
    or a source without one."""
    path = Path(cfg.train_data)
    if not path.is_dir():
        return None
    if (path / "dataset_dict.json").is_file():
        names = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
    elif (path / "state.json").is_file():
        return None
    else:
        by_split, named = splits_of(path)
        names = by_split if named else {}
    return next((name for name in HELD_OUT_SPLITS if name in names and name != cfg.split), None)
