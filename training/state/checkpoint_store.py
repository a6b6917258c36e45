"""Where a run's checkpoints live: a directory on the run's volume, or an S3 prefix
(`checkpoint.uri: s3://bucket/prefix`). Both hold the same layout (training.contract.checkpoint_dirs):
step-<8 digits>/ with DCP's shards and `.metadata`, per-rank RNG state, `train_state.json` and, last,
`COMPLETE`, the manifest of every file's size. The checkpointer (training.state.checkpoint) asks a store
for exactly what it needs: the complete steps, small files put and got, DCP's writer and reader of a
step, a step's files and their sizes, removal, and setting a bad checkpoint aside.

In a bucket, DCP's shards are written and read by s3torchconnector's DCP storage writer and reader
(AWS's own, on its CRT client); every item keeps its block checksums (training.state.item_checksums).
An object exists whole or not at all, so a cut-off upload leaves a step without `COMPLETE`, never a
torn file. One rank lists the prefix and tells the others (every rank listing at once is throttled
by S3 and can misread an empty answer as "no checkpoint"). Credentials, region and endpoint come from
the standard AWS variables and profiles (the pod's service account role on EKS).
"""

from __future__ import annotations

import io
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from training.contract.checkpoint_dirs import (COMPLETE, CORRUPT_SUFFIX, complete_checkpoints, is_checkpoint, step_dir,
                                              step_name, step_of)
from training.contract import buckets
from training.state import item_checksums
from training.state.checkpoint_files import (bytes_on_disk, own_files, verify_files, write_durably)
from training.state.node_local import NodeLocalTier, TieredReader


class VolumeStore:
    """Checkpoints in a directory (the run's volume: a PersistentVolumeClaim in a cluster)."""

    tier = "shared volume"
    per_node = False  # one place every rank sees (rank 0 clears and prunes), not a directory per node

    def __init__(self, root: Path):
        self.root = Path(root)
        self.where = str(self.root.resolve())

    def location(self, step: int) -> str:
        return str(step_dir(self.root, step).resolve())

    def complete_steps(self) -> list[int]:
        return [step_of(p) for p in complete_checkpoints(self.root)]

    def incomplete_steps(self) -> list[int]:
        return [step_of(p) for p in self.root.glob("step-*") if not is_checkpoint(p)] if self.root.is_dir() else []

    def has(self, step: int, name: str) -> bool:
        return (step_dir(self.root, step) / name).exists()

    def clear(self, step: int) -> None:
        """Leftovers of an interrupted save of `step` removed, its directory made."""
        target = step_dir(self.root, step)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)

    def put(self, step: int, name: str, data: bytes, sync: bool = True) -> None:
        path = step_dir(self.root, step) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".pt"):  # a rank's own file, synced with its shards
            path.write_bytes(data)
        else:
            write_durably(path, data.decode(), sync)

    def get(self, step: int, name: str) -> bytes:
        return (step_dir(self.root, step) / name).read_bytes()

    def writer(self, step: int, threads: int, sync: bool, node_local: NodeLocalTier):
        return item_checksums.writer(step_dir(self.root, step), threads, sync)

    def written(self, step: int, rank: int, node_local: NodeLocalTier) -> dict[str, list]:
        """This rank's files of `step` for the manifest (size, and the CRC32 of the small ones), each
        shard copied to the node's memory tier."""
        own = own_files(step_dir(self.root, step), rank)
        node_local.keep(step_dir(self.root, step), [name for name in own if name.endswith(".distcp")])
        return own

    def listed(self, step: int) -> dict[str, list]:
        return {}  # every rank named its own files (written)

    def verify(self, step: int, manifest: dict, rank: int, world_size: int) -> str | None:
        return verify_files(step_dir(self.root, step), manifest, rank, world_size)

    def reader(self, step: int, held: dict[str, Path], threads: int):
        return TieredReader(step_dir(self.root, step), held, threads)

    def remove(self, step: int) -> None:
        shutil.rmtree(step_dir(self.root, step), ignore_errors=True)

    def set_aside(self, step: int) -> str:
        path = step_dir(self.root, step)
        aside = path.with_name(path.name + CORRUPT_SUFFIX)
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(path, aside)
        return f"moved to {aside}"

    def size(self, step: int) -> float:
        return bytes_on_disk(step_dir(self.root, step))

    def free_bytes(self) -> float | None:
        self.root.mkdir(parents=True, exist_ok=True)
        return shutil.disk_usage(self.root).free


class BucketStore:
    """Checkpoints under an S3 prefix, written and read with s3torchconnector. The node-local tier
    stays in front: a rank's shards are written to the bucket and to the node's memory in one pass."""

    tier = "bucket"
    per_node = False

    def __init__(self, uri: str):
        from s3torchconnector._s3client import S3Client

        self.uri = self.where = uri.rstrip("/")
        self.bucket, self.prefix = buckets.split_uri(self.uri)
        self.region = buckets.region(buckets.CHECKPOINT_URI_KEY)
        self.client = S3Client(self.region, endpoint=os.environ.get("AWS_ENDPOINT_URL"))

    def key(self, step: int, name: str = "") -> str:
        return "/".join(part for part in (self.prefix, step_name(step), name) if part)

    def location(self, step: int) -> str:
        return f"s3://{self.bucket}/{self.key(step)}"

    def _objects(self, prefix: str) -> dict[str, int]:
        """Key -> size of every object under `prefix` (one LIST, paged)."""
        return buckets.objects(self.client, buckets.CHECKPOINT_URI_KEY, self.uri, prefix)

    def complete_steps(self) -> list[int]:
        return sorted(buckets.step_folders(self.client, buckets.CHECKPOINT_URI_KEY, self.uri)[0])

    def incomplete_steps(self) -> list[int]:
        complete, seen = buckets.step_folders(self.client, buckets.CHECKPOINT_URI_KEY, self.uri)
        return sorted(seen - complete)

    def has(self, step: int, name: str) -> bool:
        return self.key(step, name) in self._objects(self.key(step, name))

    def clear(self, step: int) -> None:
        self.remove(step)

    def put(self, step: int, name: str, data: bytes, sync: bool = True) -> None:
        with self.client.put_object(self.bucket, self.key(step, name)) as stream:  # visible once closed, whole
            stream.write(data)

    def get(self, step: int, name: str) -> bytes:
        from s3torchconnectorclient import S3Exception

        try:
            return self.client.get_object(self.bucket, self.key(step, name)).read()
        except S3Exception as e:
            raise FileNotFoundError(f"{self.location(step)}/{name}: {e}") from None

    def writer(self, step: int, threads: int, sync: bool, node_local: NodeLocalTier):
        from s3torchconnector.dcp import S3StorageWriter

        writer = S3StorageWriter(self.region, self.location(step), thread_count=threads,
                                 _extensions=[item_checksums.ItemCrc32()])
        if node_local.root is not None:
            writer.fs = _TeeToNodeMemory(writer.fs, step_dir(node_local.root, step))
        return writer

    def written(self, step: int, rank: int, node_local: NodeLocalTier) -> dict[str, list]:
        return {}  # rank 0 lists the step's objects once every rank has written (listed)

    def listed(self, step: int) -> dict[str, list]:
        """The step's objects and their sizes, for its manifest (each shard's items carry their checksums)."""
        return {key.removeprefix(self.key(step) + "/"): [size, None]
                for key, size in self._objects(self.key(step) + "/").items()}

    def verify(self, step: int, manifest: dict, rank: int, world_size: int) -> str | None:
        """Rank 0 compares the manifest's sizes with one listing of the step; the others agree on its answer."""
        if rank != 0:
            return None
        found = {name: size for name, (size, _) in self.listed(step).items()}
        for name, (size, _) in sorted(manifest.items()):
            if name not in found:
                return f"{self.location(step)}/{name} is missing"
            if found[name] != size:
                return f"{self.location(step)}/{name} has {found[name]} bytes, {size} expected (truncated or overwritten)"
        return None

    def reader(self, step: int, held: dict[str, Path], threads: int):
        return bucket_reader(self.region, self.location(step), held)

    def remove(self, step: int) -> None:
        for key in self._objects(self.key(step) + "/"):
            self.client.delete_object(self.bucket, key)

    def set_aside(self, step: int) -> str:
        """A bucket cannot rename a folder: the manifest moves to COMPLETE.corrupt, so the step is no
        longer a checkpoint and its files stay for a look."""
        manifest = self.get(step, COMPLETE)
        self.put(step, COMPLETE + CORRUPT_SUFFIX, manifest)
        self.client.delete_object(self.bucket, self.key(step, COMPLETE))
        return f"moved to {self.location(step)}/{COMPLETE}{CORRUPT_SUFFIX}"

    def size(self, step: int) -> float:
        return sum(size for size, _ in self.listed(step).values())

    def free_bytes(self) -> float | None:
        return None  # a bucket does not fill up


def open_store(where: Path | str) -> VolumeStore | BucketStore:
    return BucketStore(str(where)) if buckets.is_s3(str(where)) else VolumeStore(Path(where))


class _TeeToNodeMemory:
    """s3torchconnector's file system for DCP, with every shard it writes also written to the node's
    memory tier in the same pass (a restart in a pod that stayed reads them there)."""

    def __init__(self, fs, node_dir: Path):
        self.fs, self.node_dir = fs, node_dir

    def __getattr__(self, name):
        return getattr(self.fs, name)

    @contextmanager
    def create_stream(self, path, mode):
        name = os.path.basename(str(path))
        if mode != "wb" or not name.endswith(".distcp"):  # a shard, as the volume's tier copies them
            with self.fs.create_stream(path, mode) as stream:
                yield stream
            return
        self.node_dir.mkdir(parents=True, exist_ok=True)
        with self.fs.create_stream(path, mode) as remote, open(self.node_dir / name, "wb") as local:
            yield _Tee(remote, local)


class _Tee(io.RawIOBase):
    def __init__(self, *outputs):
        self.outputs = outputs

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        for output in self.outputs:
            output.write(data)
        return len(memoryview(data).cast("B"))

    def tell(self) -> int:  # DCP records each item's offset in its file
        return self.outputs[0].tell()


def bucket_reader(region_name: str, uri: str, held: dict[str, Path]):
    """s3torchconnector's DCP reader of `uri`, every checksummed item checked as it is read; the shards
    this node holds whole (`held`) read from its memory tier. Counts the bytes read from each tier."""
    from s3torchconnector.dcp import S3StorageReader
    from torch.distributed.checkpoint.filesystem import _StorageReaderTransforms

    from training.state.node_local import NODE_LOCAL

    class BucketReader(S3StorageReader):
        def __init__(self):
            super().__init__(region_name, uri)
            self.transforms = _StorageReaderTransforms(item_checksums.registry())
            self.local_names = {str(p) for p in held.values()}
            self.bytes_read = {NODE_LOCAL: 0, BucketStore.tier: 0}
            remote = self.fs.create_stream
            moved = {os.path.join(uri, name): path for name, path in held.items()}

            @contextmanager
            def create_stream(path, mode):
                if str(path) in moved:
                    with open(moved[str(path)], mode) as stream:
                        yield stream
                else:
                    with remote(path, mode) as stream:
                        yield stream

            self.fs.create_stream = create_stream

        def _slice_file(self, file, sinfo):
            local = getattr(file, "name", None) in self.local_names
            self.bytes_read[NODE_LOCAL if local else BucketStore.tier] += sinfo.length
            return super()._slice_file(file, sinfo)

    return BucketReader()
