"""The checkpoint directory contract: <run_dir>/checkpoints/step-<8 digits>/, a checkpoint only once
its COMPLETE marker exists. Torch-free, so the launcher can read where a run stands."""

from __future__ import annotations

from pathlib import Path

COMPLETE = "COMPLETE"
CORRUPT_SUFFIX = ".corrupt"  # a checkpoint that failed verification, set aside


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def step_dir(root: Path, step: int) -> Path:
    return root / step_name(step)


def step_of(path: Path) -> int:
    """The step of step-00000012 (also of a set-aside step-00000012.corrupt)."""
    return int(path.name.split("-", 1)[1].split(".")[0])


def is_checkpoint(path: Path) -> bool:
    return path.name[5:].isdigit() and (path / COMPLETE).exists()


def complete_checkpoints(root: Path) -> list[Path]:
    """Checkpoints marked COMPLETE, oldest first (not yet verified)."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.glob("step-*") if is_checkpoint(p)), key=step_of)


def latest_checkpoint(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def steps_of_keys(keys, prefix: str) -> tuple[set[int], set[int]]:
    """(complete steps, steps with any file) among an S3 listing's keys under `prefix` (no trailing slash)."""
    complete, seen = set(), set()
    base = f"{prefix}/" if prefix else ""
    for key in keys:
        folder, _, name = key[len(base):].partition("/")
        if key.startswith(base) and folder.startswith("step-") and folder[5:].isdigit():
            seen.add(int(folder[5:]))
            if name == COMPLETE:
                complete.add(int(folder[5:]))
    return complete, seen
