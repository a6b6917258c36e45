"""A checkpoint's files on the disk: written durably (the whole file or none), put on the disk
(fsync) now or in the background, the manifest of their sizes and checksums and its verification;
and the I/O settings a save or a load runs with."""

from __future__ import annotations

import gc
import os
import threading
import zlib
from contextlib import contextmanager, suppress
from pathlib import Path

import torch

from training.contract.checkpoint_dirs import COMPLETE, step_of

STATE_FILE = "train_state.json"
SYNC_DEADLINE_S = 30.0  # a resize's checkpoint is on the disk this long after its save at the latest


def io_threads() -> int:
    """Threads a rank writes and reads its checkpoint files with: the node's cores shared by its
    ranks, at most 4 (each thread writes a file of its own)."""
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    return max(1, min(4, (os.cpu_count() or 1) // ranks_here))


@contextmanager
def lean_io():
    """What a checkpoint's save or load does without:
    - Python's cyclic garbage collector: DCP pickles and unpickles its plans and metadata, many small
      objects that set it off, and each collection walks the whole heap (torch, transformers, the
      model); measured, half the time of a save of a 58M-parameter model, a third of its load. A
      save or load leaves no cycles worth collecting on the way.
    - torch.save's own CRC32 of every record: every item already carries its block checksums, and
      torch.load never checks it; it is a second pass over every byte written.
    Both settings are the process's: during an async save's write the training thread runs without
    the collector too (its cycles wait for the end of the write; nothing leaks)."""
    enabled, crc = gc.isenabled(), torch.serialization.get_crc32_options()
    gc.disable()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(crc)
        if enabled:
            gc.enable()


def bytes_on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1000
    raise AssertionError


def crc32(path: Path, chunk: int = 16 << 20) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            crc = zlib.crc32(block, crc)
    return crc


def write_durably(path: Path, text: str, sync: bool = True) -> None:
    """Write, fsync, rename into place and fsync the directory: the file exists whole or not at all
    (without `sync`, the fsyncs are left to `sync_files`)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_directory(path.parent)


def fsync_directory(path: Path) -> None:
    """Put a directory's entries (files created or renamed in it) on the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def own_files(target: Path, rank: int) -> dict[str, list]:
    """Size and CRC32 of the files this rank wrote (DCP names its shards __<rank>_<n>.distcp). A
    shard's items carry their own checksums (training.state.item_checksums), checked as DCP reads
    them: the manifest holds only its size (None for the CRC), so a load reads it once."""
    shards = list(target.glob(f"__{rank}_*.distcp"))
    small = [target / "rng" / f"rank{rank}.pt", *([target / ".metadata"] if rank == 0 else [])]
    return {**{str(f.relative_to(target)): [f.stat().st_size, None] for f in shards},
            **{str(f.relative_to(target)): [f.stat().st_size, crc32(f)] for f in small if f.exists()}}


def sync_files(target: Path, rank: int) -> None:
    """Put this rank's files of `target` on the disk; rank 0 then its state, COMPLETE and the step's
    directory entries (the marker reaches the disk after the data it vouches for)."""
    names = [*own_files(target, rank), *([STATE_FILE, COMPLETE] if rank == 0 else [])]
    for name in names:
        with suppress(OSError), open(target / name, "rb") as f:
            os.fsync(f.fileno())
    if rank == 0:
        with suppress(OSError):
            fsync_directory(target)


def verify_files(path: Path, manifest: dict, rank: int, world_size: int) -> str | None:
    """This rank's share of the verification before anything is read: every file's size, and the
    CRC32 of every world_size-th file that has one in the manifest (small files, and every file of
    a checkpoint written before shards carried item checksums)."""
    for i, (name, (size, crc)) in enumerate(sorted(manifest.items())):
        f = path / name
        if not f.is_file():
            return f"{f} is missing"
        if f.stat().st_size != size:
            return f"{f} has {f.stat().st_size} bytes, {size} expected (truncated or overwritten)"
        if crc is not None and i % world_size == rank and crc32(f) != crc:
            return f"{f} fails its checksum (corrupted bytes)"
    return None


class DeferredSync:
    """A saved checkpoint's files put on the disk in the background, and only then the older
    checkpoints pruned (the one before stays the fallback until this one is durable). It waits for
    `release()`, called once the next world size has trained its first step, or at most
    SYNC_DEADLINE_S: measured, syncing a 58M-parameter model's 698 MB while the next size starts
    slows that start by 0.6 s (the writeback competes with its reads and allocations)."""

    def __init__(self, target: Path, rank: int, prune=None):
        self.target, self.done = target, threading.Event()
        self._released = threading.Event()
        threading.Thread(target=self._run, args=(rank, prune), name="checkpoint-sync", daemon=True).start()

    def release(self) -> None:
        self._released.set()

    def _run(self, rank: int, prune) -> None:
        self._released.wait(SYNC_DEADLINE_S)
        try:
            sync_files(self.target, rank)
            if prune is not None:
                prune(step_of(self.target))
        finally:
            self.done.set()
