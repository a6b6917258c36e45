"""The training methods the trainer implements, by name: the modules of training/methods.

Read from the files, not imported (the methods import torch): the config accepts any name found."""

from __future__ import annotations

from pathlib import Path

METHODS_DIR = Path(__file__).resolve().parent.parent / "methods"


def method_names() -> tuple[str, ...]:
    """The trainer_type values (training_args.trainer_type) a module of training/methods implements."""
    return tuple(sorted(p.stem for p in METHODS_DIR.glob("*.py") if p.stem not in ("__init__", "base")))
