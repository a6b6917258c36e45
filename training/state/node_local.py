"""The node-local tier: each node keeps its ranks' shards of the newest checkpoint in node memory (a
memory-backed volume of the pod, $ELASTIC_NODE_LOCAL_DIR), beside the durable copy on the shared
volume, so a restart in a pod that stayed reads them from memory.

- Written: after a rank's shards reach the shared volume, it copies them here (a failed copy, e.g.
  a full memory volume, is dropped with a warning: the shared copy is the checkpoint). Once a
  checkpoint is COMPLETE on the shared volume, the node drops every older step it holds.
- The model's files: a LoRA (or DPO with LoRA) job reads its frozen base from the model's files on
  every start; one process per node copies them here on the first start, and every later start on
  the node reads them from memory.
- Read: for the newest checkpoint COMPLETE on the shared volume (the only authority: a copy here
  of a step the shared volume does not show complete is never used), each shard file this node
  holds with the size the manifest gives is read from here, every other from the shared volume;
  of a stored tensor a rank reads only the byte range it holds at its world size, and every
  block it reads is checked against its checksum either way. A node that was lost took its copy
  with it: its shards come from the shared volume. If a copy here fails its checksums, the load is
  repeated from the shared volume alone before the checkpoint is given up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from training.contract.config_files import NODE_LOCAL_DIR_ENV
from training.state import item_checksums

SHARED, NODE_LOCAL = "shared volume", "node memory"
READY = ".complete"  # a whole copy of the model's files


class NodeLocalTier:
    """This node's memory volume (None when the job has none): `checkpoints/` holds this node's
    shards of the newest checkpoint, `model/` the frozen base model's files of a LoRA job."""

    def __init__(self, volume: Path | None):
        self.volume = volume
        self.root = volume / "checkpoints" if volume is not None else None
        self._warned = False

    @classmethod
    def from_env(cls, node_rank: int) -> "NodeLocalTier":
        value = os.environ.get(NODE_LOCAL_DIR_ENV)
        return cls(Path(value.replace("{node_rank}", str(node_rank))) if value else None)

    def keep(self, step_dir: Path, names: list[str]) -> None:
        """Copy this rank's files of `step_dir` (on the shared volume) here; a failed copy leaves none.
        Where both are one filesystem (local runs) a hard link is the copy: checkpoint files are
        never changed in place, and the link keeps the bytes when the shared file is pruned."""
        if self.root is None:
            return
        target = self.root / step_dir.name
        for name in names:
            tmp = target / f"{name}.tmp-{os.getpid()}"
            try:
                target.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(step_dir / name, tmp)
                except OSError:  # another filesystem (a pod's memory volume): copy the bytes
                    shutil.copyfile(step_dir / name, tmp)
                os.replace(tmp, target / name)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                (target / name).unlink(missing_ok=True)
                if not self._warned:
                    print(f"warning: node-local copy of {step_dir.name} failed ({e.strerror}): restarts read it from "
                          f"the shared volume", file=sys.stderr, flush=True)
                    self._warned = True

    def model_copy(self, source: str) -> str:
        """The model's files (`source`, on the shared volume or the hub cache) copied once into this
        node's memory, the copy's directory returned; `source` itself where there is no memory volume
        or the copy fails (a full volume: warned, the files are read where they are). Called by one
        process per node."""
        if self.volume is None:
            return source
        target = self.volume / "model" / hashlib.sha256(str(Path(source).resolve()).encode()).hexdigest()[:16]
        if (target / READY).exists():
            return str(target)
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(".*"))  # follows the hub cache's links
            (tmp / READY).touch()
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"warning: node-local copy of the model's files failed ({e.strerror}): every start reads them from "
                  f"{source}", file=sys.stderr, flush=True)
            return source
        return str(target)

    def drop_all_but(self, step_name: str) -> None:
        if self.root is not None and self.root.is_dir():
            for other in self.root.iterdir():
                if other.name != step_name:
                    shutil.rmtree(other, ignore_errors=True)

    def holding(self, step_name: str, manifest: dict) -> dict[str, Path]:
        """Shard name -> this node's copy, for every shard of checkpoint `step_name` held here whole
        (the size in the manifest; which bytes are right, the items' checksums tell)."""
        if self.root is None:
            return {}
        here = self.root / step_name
        return {name: here / name for name, (size, _) in manifest.items()
                if name.endswith(".distcp") and (here / name).is_file() and (here / name).stat().st_size == size}


class _TieredFileSystem(FileSystem):
    def __init__(self, shared: Path, held: dict[str, Path]):
        super().__init__()
        self.moved = {str(shared / name): path for name, path in held.items()}

    def open(self, path):
        return open(self.moved.get(str(path), path), "rb")

    @contextmanager
    def create_stream(self, path, mode):
        with super().create_stream(Path(self.moved.get(str(path), path)), mode) as stream:
            yield stream


def _row_major(lengths: list[int], stride: tuple[int, ...]) -> bool:
    """Whether elements with these lengths and strides lie one after another (C order, no gaps)."""
    expected = 1
    for n, s in reversed(list(zip(lengths, stride))):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


class TieredReader(FileSystemReader):
    """DCP's file reader over the shared step directory, taking the files in `held` from the node's
    copy; counts the bytes it read from each tier. A tensor item with block checksums is read as the
    byte range this rank needs, straight into its destination where the layouts allow (a rank that
    holds half of a stored tensor reads half of it); every other item the usual way, whole. Every
    checksummed byte read is checked. The files are read on `threads` threads (reading, checksums
    and copies release the GIL), one file each."""

    def __init__(self, path: Path, held: dict[str, Path] | None = None, threads: int = 1, fs=None,
                 tiers: tuple[str, str] = (NODE_LOCAL, SHARED)):
        super().__init__(path, _extension_registry=item_checksums.registry())
        held = held or {}
        self.fs = fs or _TieredFileSystem(Path(path), held)  # `fs`: another way to the same files (peers)
        self.local_names = {str(p) for p in held.values()}
        self.threads = threads
        self.tiers = tiers  # (where `held` lies, where every other file does)
        self.bytes_read = {tier: 0 for tier in tiers}
        self._lock = threading.Lock()

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args, **kwargs) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        self.tensors = metadata.state_dict_metadata

    def _count(self, file_name: str | None, n: int) -> None:
        with self._lock:
            self.bytes_read[self.tiers[file_name not in self.local_names]] += n

    def _slice_file(self, file, sinfo):
        self._count(getattr(file, "name", None), sinfo.length)
        return super()._slice_file(file, sinfo)

    def _ranged(self, req: ReadItem) -> bool:
        return req.type == LoadItemType.TENSOR and \
            self.storage_data[req.storage_index].transform_descriptors == [item_checksums.BLOCKS_DESCRIPTOR]

    def _read_range(self, file, req: ReadItem, planner: LoadPlanner) -> bool:
        """Read `req` as the byte range it needs; False when the stored tensor's layout is not a plain
        one (then it is read whole)."""
        info = self.storage_data[req.storage_index]
        dtype = self.tensors[req.storage_index.fqn].properties.dtype
        size = dtype.itemsize
        item = item_checksums.ChecksummedItem(file, info.offset, info.length)
        try:
            layout = item_checksums.tensor_layout(item, size)
            if layout is None:
                return False
            lengths, stride = list(req.lengths), layout.stride
            count = item_checksums.element_span(lengths, stride)
            start = layout.start + sum(o * s for o, s in zip(req.storage_offsets, stride)) * size
            target = planner.resolve_tensor(req).detach()
            direct = target.device.type == "cpu" and target.dtype == dtype and target.is_contiguous()
            if direct and _row_major(lengths, stride):
                item.read(start, memoryview(target.reshape(-1).view(torch.uint8).numpy()))  # straight in
            else:
                buffer = bytearray(count * size)
                item.read(start, memoryview(buffer))
                if count:
                    target.copy_(torch.frombuffer(buffer, dtype=dtype).as_strided(lengths, stride))
            planner.commit_tensor(req, target)
            return True
        finally:
            self._count(file.name, item.bytes_read)

    def _read_file(self, name: str, items: list, plan: LoadPlan, planner: LoadPlanner) -> None:
        whole = [req for req in items if not self._ranged(req)]
        ranged = [req for req in items if self._ranged(req)]
        if ranged:
            with self.fs.open(self.fs.concat_path(self.path, name)) as file:
                whole += [req for req in ranged if not self._read_range(file, req, planner)]
        if whole:
            super().read_data(dataclasses.replace(plan, items=whole), planner)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        by_file: dict[str, list] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        with ThreadPoolExecutor(max_workers=max(1, min(self.threads, len(by_file))),
                                thread_name_prefix="ckpt-read") as pool:
            for done in [pool.submit(self._read_file, name, items, plan, planner) for name, items in by_file.items()]:
                done.result()
        future: Future = Future()
        future.set_result(None)
        return future
