"""Distributed checkpoints (DCP) that survive a change of world size.

Layout: <run_dir>/checkpoints/step-00000012/ holding DCP's shards, `.metadata`, `train_state.json`
and, written last, `COMPLETE`. Only a directory with `COMPLETE` is a checkpoint: a save cut short by
SIGKILL is skipped on resume and cleaned up later. Model and optimizer state are DTensor shards that
DCP reshards on load; the trainer state (step, consumed samples) is a replicated scalar, so it is the
same at any world size. Per-rank RNG state is kept only when the world size is unchanged.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from training.config import ConfigError

COMPLETE = "COMPLETE"
STATE_FILE = "train_state.json"


@dataclass
class TrainState:
    step: int = 0
    consumed_samples: int = 0
    world_size: int = 1
    fingerprint: dict | None = None  # settings that must not change across restarts


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def _step_of(path: Path) -> int:
    return int(path.name.split("-", 1)[1])


def complete_checkpoints(root: Path) -> list[Path]:
    """Valid checkpoints, oldest first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.glob("step-*") if (p / COMPLETE).exists()), key=_step_of)


def latest_checkpoint(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def _allocate_adamw_state(optimizer) -> None:
    """Give a fresh AdamW its (zero) state so DCP has tensors to load into. torch's generic fallback
    runs a whole optimizer step for this, which dominates resume time for large models on CPU."""
    if optimizer.state or not isinstance(optimizer, torch.optim.AdamW):
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = torch.zeros_like(p)
            optimizer.state[p] = state


def _snapshot(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_snapshot(v) for v in obj]
    return obj


def bytes_on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Checkpointer:
    def __init__(self, root: Path, keep_last: int, async_save: bool, rank: int, world_size: int):
        self.root, self.keep_last, self.rank, self.world_size = Path(root), keep_last, rank, world_size
        self.async_save = async_save
        self._pending = None  # (future, directory, state) of an async save in flight
        self.load_seconds: dict[str, float] = {}  # prepare / read / apply times of the last load
        # An async save runs its collectives in a background thread: on a group of its own (gloo, which
        # also serves CPU staging under NCCL), never interleaved with the training's.
        self._group = dist.new_group(backend="gloo") if async_save else None

    def _app_state(self, model, optimizer, scheduler) -> dict:
        _allocate_adamw_state(optimizer)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd, "scheduler": scheduler.state_dict()}

    def save(self, model, optimizer, scheduler, state: TrainState, blocking: bool = False) -> Path:
        self.wait()  # one save in flight at a time
        target = step_dir(self.root, state.step)
        if (target / COMPLETE).exists():
            return target
        if self.rank == 0:
            shutil.rmtree(target, ignore_errors=True)  # leftovers of an interrupted save of this step
            target.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        app = self._app_state(model, optimizer, scheduler)
        rng = target / "rng" / f"rank{self.rank}.pt"
        rng.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"cpu": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}, rng)
        if self.async_save and not blocking:
            # Write a private CPU copy in the background, so training may update the parameters.
            future = dcp.async_save(_snapshot(app), checkpoint_id=str(target), process_group=self._group)
            self._pending = (future, target, replace(state))  # training goes on mutating `state`
        else:
            dcp.save(app, checkpoint_id=str(target))
            self._finish(target, state)
        return target

    @property
    def writing(self) -> bool:
        """An async save is still writing on this rank. Ranks finish at different times, so the
        trainer agrees on "all done" in a collective before calling wait()."""
        return self._pending is not None and not self._pending[0].done()

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def wait(self) -> None:
        if self._pending:
            future, target, state = self._pending
            self._pending = None
            future.result()
            self._finish(target, state)

    def _finish(self, target: Path, state: TrainState) -> None:
        dist.barrier()  # every rank's shard is on disk
        if self.rank == 0:
            (target / STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
            (target / COMPLETE).touch()  # written last: the checkpoint exists from here on
            self._prune(_step_of(target))
        dist.barrier()

    def _prune(self, newest: int) -> None:
        for old in complete_checkpoints(self.root)[: -self.keep_last or None]:
            shutil.rmtree(old, ignore_errors=True)
        for partial in self.root.glob("step-*"):
            if not (partial / COMPLETE).exists() and _step_of(partial) < newest:
                shutil.rmtree(partial, ignore_errors=True)

    def load(self, model, optimizer, scheduler, fingerprint: dict, ignore_fingerprint: bool) -> TrainState | None:
        """Resume from the newest complete checkpoint, resharded to this world size."""
        path = latest_checkpoint(self.root)
        if path is None:
            return None
        state = TrainState(**json.loads((path / STATE_FILE).read_text()))
        changed = {k: (state.fingerprint.get(k), v) for k, v in fingerprint.items()
                   if state.fingerprint and state.fingerprint.get(k) != v}
        if changed and not ignore_fingerprint:
            detail = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
            raise ConfigError(f"checkpoint {path} was written with different settings ({detail}): the data stream "
                              f"would not continue exactly; restore them, use a new run.output_dir, or set "
                              f"training_config.checkpoint.ignore_fingerprint=true to resume anyway")
        marks = [time.perf_counter()]
        app = self._app_state(model, optimizer, scheduler)  # allocates the optimizer state to read into
        marks.append(time.perf_counter())
        dcp.load(app, checkpoint_id=str(path))
        marks.append(time.perf_counter())
        set_state_dict(model, optimizer, model_state_dict=app["model"], optim_state_dict=app["optim"])
        scheduler.load_state_dict(app["scheduler"])
        marks.append(time.perf_counter())
        self.load_seconds = dict(zip(("prepare", "read", "apply"), (b - a for a, b in zip(marks, marks[1:]))))
        rng = path / "rng" / f"rank{self.rank}.pt"
        if state.world_size == self.world_size and rng.exists():
            saved = torch.load(rng, weights_only=False)
            torch.set_rng_state(saved["cpu"])
            if saved["cuda"] is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state(saved["cuda"])
        return state
