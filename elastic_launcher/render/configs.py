"""Plan -> the per-size training configs the trainer reads (config.yaml, config-n<N>.yaml), and a
directory of files written all or nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import yaml

from elastic_launcher.errors import LauncherError, make_dir
from elastic_launcher.planning.plan import Plan
from training.contract.config_files import BASE_CONFIG_FILE, config_file_for

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when available: 5x faster


def dump_yaml(data) -> str:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=120)


def config_files(plan: Plan) -> dict[str, str]:
    """File name -> resolved training config (YAML): the base config and one per allowed size."""
    files = {BASE_CONFIG_FILE: dump_yaml(asdict(plan.base))}
    for size in plan.sizes:
        files[config_file_for(size.nodes)] = dump_yaml(asdict(size.config))
    return files


def write_files(out_dir: Path, files: dict[str, str], setting: str = "output_dir") -> Path:
    """`out_dir` holding exactly `files` (relative path -> text). Written to a temporary sibling
    first and swapped in, so an interrupted write never leaves a half-written directory behind.
    `setting`: the key that chose the directory, named when it cannot be written."""
    make_dir(out_dir.parent, setting)
    if out_dir.exists() and not out_dir.is_dir():
        raise LauncherError(f"{setting}: {out_dir} is a file: set {setting} to a directory you can write")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    except OSError as e:
        raise LauncherError(f"{setting}: cannot write in {out_dir.parent} ({e.strerror}): set {setting} to a directory "
                            f"you can write") from None
    try:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
