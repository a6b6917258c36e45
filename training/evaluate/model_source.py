"""`run.model_name_or_path` -> what the engine loads: an export directory as it is, a run's checkpoint step
exported once on the fly, an s3:// prefix downloaded once, a LoRA adapter over its base, or a hub id."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from training.contract import buckets
from training.contract.checkpoint_dirs import COMPLETE, step_of
from training.contract.errors import ConfigError
from training.contract.evaluation import check_model_name

KEY = "run.model_name_or_path"


@dataclass(frozen=True)
class ModelSource:
    pretrained: str  # a directory or a hub id
    adapter: str | None  # a LoRA adapter's directory, applied over `pretrained`
    fingerprint: str  # names these weights: the work store's directory
    step: int | None  # the training step the weights are from, where known (MLflow's step)


def _directory_fingerprint(path: Path) -> str:
    """Each file's name, size and modification time: a re-export or new weights change it, a re-read does not."""
    files = sorted(p for p in path.rglob("*") if p.is_file())
    facts = [(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps([str(path.resolve()), facts]).encode()).hexdigest()[:16]


def resolve(name: str, cache: Path, rank: int, key: str = KEY, wait_s: float = 3600.0,
            run_config: str = "") -> ModelSource:
    """`run_config`: a checkpoint's run config (job_config.yaml), which exports a checkpoint kept in S3."""
    if buckets.is_s3(name) and run_config and PurePosixPath(name.rstrip("/")).name.startswith("step-"):
        export = cache / PurePosixPath(name.rstrip("/")).name
        if not export.exists():
            _export(name.rstrip("/"), export, rank, wait_s, run_config)
        return ModelSource(str(export), None, _directory_fingerprint(export), step_of(Path(name.rstrip("/"))))
    if buckets.is_s3(name):
        name = str(buckets.download(key, name.rstrip("/"), cache / "s3"))
    path = Path(name).expanduser()
    if not path.exists():
        check_model_name(key, name)
        return ModelSource(name, None, hashlib.sha256(name.encode()).hexdigest()[:16], None)  # a hub id
    if (path / "adapter_config.json").exists():
        base = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not base:
            raise ConfigError(f"{key}={name}: the adapter names no base_model_name_or_path in adapter_config.json")
        return ModelSource(base, str(path), _directory_fingerprint(path), None)
    if (path / COMPLETE).exists():  # a training checkpoint: exported once, beside the results
        export = cache / f"{path.parent.parent.name}-{path.name}"
        if not export.exists():
            _export(path, export, rank, wait_s)
        return ModelSource(str(export), None, _directory_fingerprint(export), step_of(path))
    if (path / "config.json").exists():
        return ModelSource(str(path), None, _directory_fingerprint(path), None)
    raise ConfigError(f"{key}={name}: neither a model directory (config.json), a LoRA adapter "
                      f"(adapter_config.json) nor a complete checkpoint ({COMPLETE})")


def _export(checkpoint, out: Path, rank: int, wait_s: float, run_config: str = "") -> None:
    """Rank 0 exports (training.export writes elsewhere and renames once whole); the others wait for it."""
    if rank == 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"exporting {checkpoint} to {out} (once)", flush=True)
        config = ["--config", run_config] if run_config else []
        done = subprocess.run([sys.executable, "-m", "training.export", "--checkpoint", str(checkpoint),
                               "--out", str(out), *config], capture_output=True, text=True)
        if done.returncode:
            raise ConfigError(f"{KEY}={checkpoint}: export failed: {(done.stderr or done.stdout).strip().splitlines()[-1]}")
        return
    deadline = time.monotonic() + wait_s
    while not (out / "config.json").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 did not export {checkpoint} to {out} within {wait_s:.0f} s")
        time.sleep(0.5)
