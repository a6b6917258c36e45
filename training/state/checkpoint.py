"""Distributed checkpoints (DCP) that survive a change of world size, a crash mid-save, a full disk
and a corrupted file.

Layout: <run_dir>/checkpoints/step-00000012/ (or the same under `checkpoint.uri`'s S3 prefix:
training.state.checkpoint_store) holding DCP's shards, `.metadata`, per-rank RNG state,
`train_state.json` and, written last, `COMPLETE`: a JSON manifest of every file's size (and the CRC32
of the small ones on a volume; every item of a shard carries its own, training.state.item_checksums).
Only a directory with `COMPLETE` is a checkpoint. A save becomes COMPLETE only when every rank
reports success (an agreement, not a barrier, so one failed rank fails all of them with its message
instead of leaving them waiting); a failed save's directory is removed at once. A save is refused
when the model state is not finite or the disk lacks room for it. On load the manifest's sizes are
checked before anything is read and every item as DCP reads it; a checkpoint that fails is renamed
aside and the next older one is used, so a bad newest checkpoint never turns into a crash loop.

Model and optimizer state are DTensor shards that DCP reshards on load. The learning rate is not
checkpointed: it is a function of the global step and the live size's config. Per-rank RNG state is
kept only when the world size is unchanged.
"""

from __future__ import annotations

import io
import json
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)

from training.contract.checkpoint_dirs import COMPLETE, step_name, step_of
from training.contract.config import MAX_STEPS_OFF_POLICY, RESUME_INVARIANTS, CheckpointConfig, JobConfig, get_path
from training.contract.errors import ConfigError
from training.state.checkpoint_files import STATE_FILE, DeferredSync, human_bytes, io_threads, lean_io
from training.state.checkpoint_store import VolumeStore, open_store
from training.state.node_local import NodeLocalTier

# torch 2.11's DefaultStager closes itself after each stage (its copy table cleared, its buffers
# dropped): there a save takes a fresh one. Later builds keep it, and reuse its pinned buffers.
STAGER_CLOSES_ITSELF = torch.__version__ < (2, 13)
SPACE_MARGIN = 1.05  # a new checkpoint is assumed up to 5% larger than the previous one


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read. Its message is one line naming the path and the fix."""


@dataclass
class TrainState:
    step: int = 0
    consumed_samples: int = 0
    world_size: int = 1
    fingerprint: dict | None = None  # settings that must not change across restarts
    skipped_steps: int = 0  # steps whose update was dropped for a non-finite loss or gradient
    schedule: dict | None = None  # the LR schedule's max_steps and warmup_steps when it was saved
    stopped: bool = False  # saved for a stop (resize, restart), not periodically
    history: list = field(default_factory=list)  # {time, step, from, to, cause} for every restart so far


def _allocate_adamw_state(optimizer, to_load: bool) -> None:
    """Give a fresh AdamW its state so DCP has tensors to save or to load into. torch's generic
    fallback runs a whole optimizer step for this, which dominates resume time for large models on
    CPU. Tensors that a load overwrites whole are left unwritten (a failed load rebuilds the optimizer)."""
    if optimizer.state or not isinstance(optimizer, torch.optim.AdamW):
        return
    new = torch.empty_like if to_load else torch.zeros_like
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = {"step": torch.tensor(0.0), "exp_avg": new(p), "exp_avg_sq": new(p)}
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = new(p)
            optimizer.state[p] = state


def _all_finite(model) -> bool:
    """Whether this rank's parameter shards hold only finite values: one sum per shard in its own
    dtype (vectorized; a float64 sum converts element by element, 18x slower), one host sync. A NaN
    or inf anywhere makes the sum non-finite (opposite infinities make a NaN); a finite shard's sum
    overflows only at magnitudes (~1e38 / its size) no trainable model holds."""
    sums = [t.sum().double() for p in model.parameters()
            if (t := p.to_local() if hasattr(p, "to_local") else p).numel()]
    return not sums or bool(torch.isfinite(torch.stack(sums).sum()))


class Checkpointer:
    @classmethod
    def from_config(cls, section: CheckpointConfig, run_dir: Path, rank: int, world_size: int, on_gpu: bool,
                    model_options: StateDictOptions, node_local: NodeLocalTier) -> "Checkpointer":
        """The run's checkpointer from its `checkpoint` section: in `uri`, else the run's checkpoints/."""
        return cls(section.uri or run_dir / "checkpoints", section.keep_last, section.async_save, rank, world_size,
                   section.save_timeout, on_gpu, model_options, node_local)

    def __init__(self, where: Path | str, keep_last: int, async_save: bool, rank: int, world_size: int,
                 timeout_s: float = 1800.0, on_gpu: bool = False, model_options: StateDictOptions | None = None,
                 node_local: NodeLocalTier | None = None):
        # A directory, an S3 prefix (training.state.checkpoint_store), or the peer copies' store.
        self.store = open_store(where) if isinstance(where, (str, Path)) else where
        self.keep_last, self.rank, self.world_size = keep_last, rank, world_size
        self.node_local = node_local or NodeLocalTier(None)  # this node's copy of the newest checkpoint
        self.io_threads = io_threads()
        self.load_tiers: dict[str, int] = {}  # bytes the last load read from each tier
        # Which weights are saved and loaded (training.model.lora.checkpointed_weights: LoRA keeps only the adapters).
        self._options = model_options or StateDictOptions()
        self.async_save, self.timeout_s = async_save, timeout_s
        self._pending: tuple[Future, Path, TrainState, float] | None = None  # async save in flight
        self.load_seconds: dict[str, float] = {}  # prepare / read / apply times of the last load
        self.last_saved: tuple[Path, float] | None = None  # (directory, seconds) of a finished save not yet logged
        self.unsynced: DeferredSync | None = None  # a `sync_later` save's files, not yet on the disk
        # The background write runs DCP's collectives on a group of its own (gloo, which also serves CPU
        # tensors under NCCL), never interleaved with the training's; made at the first async save
        # (every rank reaches it at the same step), not on the way to the first step.
        self._group = None
        if async_save:
            # The staging copy goes into pinned host buffers that the stager caches and reuses.
            self._staging = StagingOptions(use_pinned_memory=on_gpu, use_shared_memory=False,
                                           use_async_staging=False, use_non_blocking_copy=on_gpu)
            self._stager = DefaultStager(self._staging)
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")

    def _app_state(self, model, optimizer, method: dict, to_load: bool = False) -> dict:
        """What DCP saves and loads: the model, the optimizer and, where it holds any, the method's state."""
        _allocate_adamw_state(optimizer, to_load)
        model_sd, optim_sd = get_state_dict(model, optimizer, options=self._options)
        return {"model": model_sd, "optim": optim_sd, **({"method": method} if method else {})}

    # --- save ---------------------------------------------------------------------------------------
    def newest_step(self) -> int | None:
        """The newest complete checkpoint's step, as rank 0 lists it, on every rank (a collective;
        a bucket that cannot be listed is the same one-line error on every rank)."""
        found: list = [None]
        if self.rank == 0:
            try:
                found = [self.store.complete_steps()[-1:]]
            except ConfigError as e:
                found = [str(e)]
        dist.broadcast_object_list(found, src=0)
        if isinstance(found[0], str):
            raise ConfigError(found[0])
        return found[0][0] if found[0] else None

    @property
    def where(self) -> str:
        """The checkpoints' directory or S3 prefix, as the HyperPod agent's progress names it."""
        return self.store.where

    def location(self, step: int) -> str:
        return self.store.location(step)

    def size(self, step: int) -> float:
        return self.store.size(step)

    def _space_needed(self, model) -> float:
        """Bytes the next save will take (this rank's share): the newest checkpoint's size when
        there is one (rank 0 counts it), else what is saved, estimated from this rank's shards: the
        trained parameters with AdamW's two fp32 moments, plus the frozen ones unless they are left out."""
        steps = self.store.complete_steps()  # a volume's: every rank sees the same directory
        if steps:
            return self.store.size(steps[-1]) * SPACE_MARGIN if self.rank == 0 else 0
        total = 0
        for p in model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if p.requires_grad:
                total += local.numel() * (local.element_size() + 8)
            elif not self._options.ignore_frozen_params:
                total += local.numel() * local.element_size()
        return total

    def _check_space(self, need: float, free: float, step: int) -> None:
        if free < need:
            raise CheckpointError(f"not enough disk space for checkpoint {self.location(step)}: needs "
                                  f"~{human_bytes(need)}, {human_bytes(free)} free: free space there, lower "
                                  f"checkpoint.keep_last, or point run.output_dir at a larger volume")

    def check_space(self, model, next_step: int) -> None:
        """At start: refuse a run whose next save cannot fit, before any step is trained (a
        relaunch that would fail at the same save again is a crash loop that burns compute). A
        bucket does not fill up."""
        if not isinstance(self.store, VolumeStore):
            return
        device = next(model.parameters()).device
        found = torch.tensor([self._space_needed(model), self.store.free_bytes() if self.rank == 0 else 0],
                             dtype=torch.float64, device=device)
        dist.all_reduce(found)
        self._check_space(*found.tolist(), next_step)

    def _preflight(self, model, step: int) -> None:
        """Refuse a save that would be poisoned or would not fit, before writing a byte. One
        collective: the ranks whose parameters are not all finite, plus rank 0's view of the disk."""
        on_volume = isinstance(self.store, VolumeStore)
        free = self.store.free_bytes() if self.rank == 0 and on_volume else 0
        device = next(model.parameters()).device
        found = torch.tensor([not _all_finite(model), self._space_needed(model) if on_volume else 0, free],
                             dtype=torch.float64, device=device)
        dist.all_reduce(found)
        bad, need, free = found.tolist()
        if bad:
            newest = self.newest_step()
            raise CheckpointError(f"model state at {step_name(step)} holds non-finite values on {bad:.0f} rank(s): not "
                                  f"saved; the newest checkpoint stays {_named(newest)}")
        if on_volume:
            self._check_space(need, free, step)

    def save(self, model, optimizer, state: TrainState, blocking: bool = False, sync_later: bool = False,
             method: dict | None = None) -> str:
        """Save the step's state; async unless `blocking`; returns where. With `sync_later` (a
        blocking save the process goes on from: an in-place resize) a volume's files are put on the
        disk later, by `self.unsynced` (a DeferredSync), instead of before the save returns: the next
        size starts from them at once, and a node that died before they were on disk leaves checksums
        that fail, so the job resumes from the checkpoint before (fsync is most of a blocking save's
        time). A bucket's objects are durable once written."""
        self.wait()  # one save in flight at a time
        step = state.step
        saved = [self.store.has(step, COMPLETE) if self.rank == 0 else None]  # one rank asks (a bucket: one LIST)
        dist.broadcast_object_list(saved, src=0)
        if saved[0]:
            return self.location(step)
        self._preflight(model, step)
        started = time.perf_counter()
        if self.rank == 0 or self.store.per_node:
            self.store.clear(step)  # leftovers of an interrupted save of this step (per node: each node its own)
        dist.barrier()
        app = self._app_state(model, optimizer, method or {})
        rng = io.BytesIO()
        torch.save({"cpu": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}, rng)
        self.store.put(step, f"rng/rank{self.rank}.pt", rng.getvalue())
        sync_later = sync_later and isinstance(self.store, VolumeStore)
        if self.async_save and not blocking:
            staged = self._stager.stage(app)  # a private host copy: training may update the parameters now
            if STAGER_CLOSES_ITSELF:
                self._stager = DefaultStager(self._staging)
            self._group = self._group or dist.new_group(backend="gloo")
            future = self._writer.submit(self._write, staged, step, self._group)
            self._pending = (future, step, replace(state), started)  # training goes on mutating `state`
        else:
            future: Future = Future()
            try:
                future.set_result(self._write(app, step, group=None, sync=not sync_later))  # the training's own group
            except Exception as e:  # noqa: BLE001 - reported through the agreement below
                future.set_exception(e)
            self._pending = (future, step, state, started)
            self.wait(sync=not sync_later)
            if sync_later:
                self.unsynced = DeferredSync(Path(self.location(step)), self.rank,
                                             self._prune if self.rank == 0 else None)
        return self.location(step)

    def _write(self, app: dict, step: int, group, sync: bool = True) -> dict[str, list]:
        with lean_io():
            dcp.save(app, storage_writer=self.store.writer(step, self.io_threads, sync, self.node_local),
                     process_group=group)
        return self.store.written(step, self.rank, self.node_local)

    @property
    def writing(self) -> bool:
        """An async save is still writing on this rank. Ranks finish at different times, so the
        trainer agrees on "all done" in a collective before calling wait()."""
        return self._pending is not None and not self._pending[0].done()

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def close(self) -> None:
        """Finish the save in flight and stop the writer thread (the world size ends in place)."""
        self.wait()
        if self.async_save:
            self._writer.shutdown()

    def wait(self, sync: bool = True) -> None:
        """Finish the save in flight: wait (bounded), agree on success across ranks, then mark it
        COMPLETE (with `sync`, on the disk, and prune the older ones), or remove it and raise on every rank."""
        if not self._pending:
            return
        future, step, state, started = self._pending
        self._pending = None
        try:
            result = (True, future.result(timeout=self.timeout_s), "")
        except FutureTimeout:
            result = (False, {}, f"rank {self.rank}: the write did not finish within "
                                 f"checkpoint.save_timeout={self.timeout_s:g}s")
        except Exception as e:  # noqa: BLE001 - every rank must hear about it
            result = (False, {}, f"rank {self.rank}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}")
        results = [None] * self.world_size
        dist.all_gather_object(results, result)
        failures = [msg for ok, _, msg in results if not ok]
        if failures:
            if self.rank == 0:
                self.store.remove(step)  # never leave a partial holding the space
            dist.barrier()
            raise CheckpointError(f"checkpoint {self.location(step)} failed and was removed ({failures[0]}); the newest "
                                  f"checkpoint is still {_named(self.newest_step())}")
        if self.rank == 0:
            files = {name: entry for _, own, _ in results for name, entry in own.items()} or self.store.listed(step)
            self.store.put(step, STATE_FILE, json.dumps(asdict(state), indent=1).encode(), sync)
            self.store.put(step, COMPLETE, json.dumps({"files": files}).encode(), sync)  # last: the checkpoint exists
            if sync:
                self._prune(step)
        dist.barrier()
        self.node_local.drop_all_but(step_name(step))
        self.last_saved = (step, time.perf_counter() - started)

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep_last` checkpoints (keep_last >= 1: the one just written always stays);
        drop partial saves and set-aside corrupt ones older than it."""
        for old in self.store.complete_steps()[: -self.keep_last]:
            self.store.remove(old)
        for other in self.store.incomplete_steps():
            if other < newest:
                self.store.remove(other)

    # --- load ---------------------------------------------------------------------------------------
    def _agree(self, problem: str | None) -> str | None:
        return _agree(problem, self.world_size)

    def _set_aside(self, step: int, problem: str) -> None:
        if self.rank == 0:
            aside = self.store.set_aside(step)
            print(f"warning: checkpoint {self.location(step)} is unusable ({problem}): {aside}, trying the "
                  f"previous one", file=sys.stderr, flush=True)
        dist.barrier()

    def loaded_mb_by_tier(self, device) -> dict[str, float]:
        """MB the last load read from node memory and from the shared volume or bucket, over every rank (a collective)."""
        counts = torch.tensor(list(self.load_tiers.values()), dtype=torch.float64, device=device)
        dist.all_reduce(counts)
        return {tier: round(n / 1e6, 1) for tier, n in zip(self.load_tiers, counts.tolist())}

    def load(self, model, optimizer, fingerprint: dict, ignore_fingerprint: bool,
             method: dict | None = None) -> TrainState | None:
        """Resume from the newest checkpoint that verifies, resharded to this world size."""
        while (step := self.newest_step()) is not None:
            state, manifest, problem = _verified(self.store, step, self.rank, self.world_size)
            if problem is None:
                _check_fingerprint(self.location(step), state, fingerprint, ignore_fingerprint)
                try:
                    with lean_io():
                        self._read(step, manifest, model, optimizer, method or {})
                except (Exception, CheckpointException) as e:  # noqa: BLE001 - an item that fails its checksum, ...
                    problem = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
                problem = self._agree(problem)
            if problem is None:
                self._restore_rng(step, state)
                return state
            self._set_aside(step, problem)
        return None

    def _read(self, step: int, manifest: dict, model, optimizer, method: dict) -> None:
        marks = [time.perf_counter()]
        app = self._app_state(model, optimizer, method, to_load=True)  # allocates the optimizer state to read into
        marks.append(time.perf_counter())
        reader = self.store.reader(step, self.node_local.holding(step_name(step), manifest), self.io_threads)
        try:
            dcp.load(app, storage_reader=reader)
        except CheckpointException:  # raised on every rank, whichever rank's read failed
            if _agree("node copies read" if reader.local_names else None, self.world_size) is None:
                raise
            # A node's copy may be what failed: read the shared copy alone before giving the checkpoint up.
            reader = self.store.reader(step, {}, self.io_threads)
            dcp.load(app, storage_reader=reader)
        self.load_tiers = reader.bytes_read
        marks.append(time.perf_counter())
        set_state_dict(model, optimizer, model_state_dict=app["model"], optim_state_dict=app["optim"],
                       options=self._options)
        marks.append(time.perf_counter())
        self.load_seconds = dict(zip(("prepare", "read", "apply"), (b - a for a, b in zip(marks, marks[1:]))))

    def _restore_rng(self, step: int, state: TrainState) -> None:
        if state.world_size != self.world_size:
            return
        try:
            saved = torch.load(io.BytesIO(self.store.get(step, f"rng/rank{self.rank}.pt")), weights_only=False)
        except FileNotFoundError:
            return
        torch.set_rng_state(saved["cpu"])
        if saved["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["cuda"])


def _named(step: int | None) -> str:
    return step_name(step) if step is not None else "(none)"


def _agree(problem: str | None, world_size: int) -> str | None:
    """The first problem any rank found, on every rank."""
    problems = [None] * world_size
    dist.all_gather_object(problems, problem)
    return next((p for p in problems if p), None)


def _verified(store, step: int, rank: int, world_size: int) -> tuple[TrainState | None, dict, str | None]:
    """The checkpoint's train state and manifest, and the first problem any rank found checking its
    share of the manifest (sizes of every file, CRC32 of every world_size-th), on every rank."""
    state, manifest = None, {}
    try:
        state = TrainState(**json.loads(store.get(step, STATE_FILE)))
        manifest = json.loads(store.get(step, COMPLETE) or "{}").get("files", {})
        problem = store.verify(step, manifest, rank, world_size)
    except (OSError, ValueError, TypeError) as e:
        problem = f"{type(e).__name__}: {e}"
    return state, manifest, _agree(problem, world_size)


def fingerprint(cfg: JobConfig, dataset_len: int | None = None) -> dict:
    """Settings a resumed run must share with its checkpoint for the data stream to continue (the
    list the launcher holds equal across sizes); an export, which reads no data, leaves out the
    dataset length."""
    values = {path: get_path(cfg.training_config, path) for path in RESUME_INVARIANTS}
    values = {k: asdict(v) if is_dataclass(v) else v for k, v in values.items()}
    return values if dataset_len is None else {**values, "dataset_len": dataset_len}


def load_weights(path: Path | str, model, options: StateDictOptions, expected: dict, rank: int,
                 world_size: int) -> TrainState:
    """One checkpoint's model weights (no optimizer), verified as a resume verifies them: the
    manifest's sizes and checksums, and the fingerprint of the config it is read with. What an
    export reads; `path` a step directory, or its S3 uri."""
    where, _, name = str(path).rstrip("/").rpartition("/")
    store, step = open_store(where if str(path).startswith("s3://") else Path(path).parent), step_of(Path(name))
    state, _, problem = _verified(store, step, rank, world_size)
    if problem:
        raise CheckpointError(f"checkpoint {path} is unusable ({problem}): export an older step-N directory")
    _check_fingerprint(path, state, expected, ignore=False)
    model_state = {"model": get_model_state_dict(model, options=options)}
    try:
        with lean_io():
            dcp.load(model_state, storage_reader=store.reader(step, {}, 1))
    except CheckpointException as e:
        raise CheckpointError(f"checkpoint {path} is unusable ({str(e).strip().splitlines()[-1][:300]}): export an "
                              f"older step-N directory") from None
    set_model_state_dict(model, model_state["model"], options=options)
    return state


def _check_fingerprint(path: Path | str, state: TrainState, fingerprint: dict, ignore: bool) -> None:
    changed = {k: (state.fingerprint.get(k), v) for k, v in fingerprint.items()
               if state.fingerprint and k in state.fingerprint and state.fingerprint[k] != v}
    if MAX_STEPS_OFF_POLICY in changed:  # what the checkpoint holds differs, not only the data stream: never ignored
        old, new = changed[MAX_STEPS_OFF_POLICY]
        raise ConfigError(f"checkpoint {path} was written with {MAX_STEPS_OFF_POLICY}={old}, this run sets {new}: it "
                          f"holds the {old} older policies its next rollouts are drawn by; resume with {old} or use a "
                          f"new run.output_dir")
    if changed and not ignore:
        detail = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        raise ConfigError(f"checkpoint {path} was written with different settings ({detail}): the data stream "
                          f"would not continue exactly; restore them, use a new run.output_dir, or set "
                          f"training_config.checkpoint.ignore_fingerprint=true to resume anyway")
