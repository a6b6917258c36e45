"""Peer copies: every `checkpoint.peer_steps` steps each rank's whole state (its shards of the weights
and of the optimizer, its RNG, the train state, the method's state) is kept in host memory on its own
node and on a buddy node, so that a node that dies costs the steps since that copy, not those since
the last checkpoint on the shared volume.

A copy is a checkpoint of the same layout (DCP's shards with their item checksums, `rng/`, the train
state, the `COMPLETE` manifest), written by the same `Checkpointer` into a store of a different kind:
- Written: each rank writes its shards into its node's memory volume (`<node-local>/peer/step-N/`),
  then puts them on its buddy node (the next node rank; one node's loss never takes both copies);
  rank 0 puts the metadata, the train state and, once every rank's copy is on both nodes, the
  manifest on every node. The copy is staged to host memory at the step's end and written in the
  background (the async save's path); the previous complete copy stays until the new one is complete
  on every node (double-buffered).
- Read: a step is usable when the live nodes together hold every file of its manifest with the size
  the manifest gives (a node and its buddy lost together leave it short: the durable checkpoint is
  used). Each rank reads a file from its own node where it is held, else from a live node that holds
  it, and DCP reshards to the live world size, every item checked against its checksums as it is read.

The nodes reach each other through `training.state.peer_server` (HTTP between the nodes' servers).
"""

from __future__ import annotations

import io
import json
import shutil
from contextlib import contextmanager
from pathlib import Path

from torch.distributed.checkpoint.filesystem import FileSystem

from training.contract.checkpoint_dirs import COMPLETE, step_name, step_of
from training.state import item_checksums
from training.state import peer_server as peers
from training.state.checkpoint_files import own_files
from training.state.node_local import NodeLocalTier, TieredReader

PEER_DIR = "peer"  # under the node's memory volume
NODE_MEMORY, PEERS = "node memory", "peers' memory"


class PeerStore:
    """The peer copies as a checkpoint store (training.state.checkpoint_store's interface): this node's
    directory, and the servers of every node of the live job (index: node rank)."""

    tier = PEERS
    per_node = True  # each node clears and prunes its own directory (no request to the others per step)

    def __init__(self, root: Path, servers: list[str], node_rank: int):
        self.root, self.servers, self.node_rank = root, servers, node_rank
        self.where = f"{root} (peer copies on {len(servers)} node(s))"
        nodes = len(servers)
        self.buddy = servers[(node_rank + 1) % nodes] if nodes > 1 else None

    def location(self, step: int) -> str:
        return f"peer copy {step_name(step)}"

    # --- what the live nodes hold ------------------------------------------------------------------
    def _indexes(self) -> list[dict[str, dict[str, int]]]:
        """Every live node's holdings; a node whose server does not answer holds nothing."""
        found = []
        for server in self.servers:
            try:
                found.append(peers.index(server))
            except peers.PeerError:
                found.append({})
        return found

    def holders(self, step: int, indexes: list | None = None) -> dict[str, list[tuple[str, int]]]:
        """File name -> [(server, size)] of every live node holding it."""
        where: dict[str, list[tuple[str, int]]] = {}
        for server, held in zip(self.servers, indexes or self._indexes()):
            for name, size in held.get(step_name(step), {}).items():
                where.setdefault(name, []).append((server, size))
        return where

    def _covered(self, step: int, holders: dict) -> str | None:
        """Why the live nodes cannot restore `step` (None: they can)."""
        if COMPLETE not in holders:
            return f"no live node holds {step_name(step)}'s manifest"
        manifest = json.loads(self.get(step, COMPLETE, holders)).get("files", {})
        for name, (size, _) in sorted(manifest.items()):
            if not any(s == size for _, s in holders.get(name, [])):
                return f"{name} of {step_name(step)} was on lost nodes only (a node and its buddy lost together)"
        return None

    @staticmethod
    def _manifested(indexes: list) -> list[int]:
        """The steps whose manifest some live node holds, oldest first."""
        return sorted({step_of(Path(name)) for held in indexes for name, files in held.items() if COMPLETE in files})

    def complete_steps(self) -> list[int]:
        """The steps the live nodes can restore whole, oldest first."""
        indexes = self._indexes()
        return [s for s in self._manifested(indexes) if self._covered(s, self.holders(s, indexes)) is None]

    def shortfall(self, newer_than: int | None) -> str | None:
        """Why the newest copy a live node holds, where newer than step `newer_than`, cannot be restored
        (None: there is none)."""
        indexes = self._indexes()
        steps = [s for s in self._manifested(indexes) if newer_than is None or s > newer_than]
        return self._covered(steps[-1], self.holders(steps[-1], indexes)) if steps else None

    def has(self, step: int, name: str) -> bool:
        return (self.root / step_name(step) / name).exists()

    # --- writing -----------------------------------------------------------------------------------
    def clear(self, step: int) -> None:
        """Leftovers of an earlier attempt at `step` on this node removed (every rank of it calls this
        before the barrier that starts a copy: nothing of two attempts is ever mixed)."""
        shutil.rmtree(self.root / step_name(step), ignore_errors=True)

    def drop_older(self, step: int) -> None:
        """`step` is complete on every node: this node's older copies go (an old copy left short by lost
        nodes with them)."""
        for other in self.root.glob("step-*"):
            if other.name < step_name(step):
                shutil.rmtree(other, ignore_errors=True)

    def put(self, step: int, name: str, data: bytes, sync: bool = True) -> None:
        """A rank's own file (its RNG) is written here and reaches the buddy with its shards
        (`written`); the step's shared files (train state, manifest: rank 0's) go to every node."""
        path = self.root / step_name(step) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if not name.startswith("rng/"):
            for server in self.servers:
                if server != self.servers[self.node_rank]:
                    peers.send(f"{server}/{step_name(step)}/{name}", data)

    def get(self, step: int, name: str, holders: dict | None = None) -> bytes:
        path = self.root / step_name(step) / name
        if path.is_file():
            return path.read_bytes()
        for server, _ in (holders or self.holders(step)).get(name, []):
            try:
                return peers.fetch(f"{server}/{step_name(step)}/{name}")
            except peers.PeerError:
                continue
        raise FileNotFoundError(f"no live node holds {step_name(step)}/{name}")

    def writer(self, step: int, threads: int, sync: bool, node_local: NodeLocalTier):
        return item_checksums.writer(self.root / step_name(step), threads, sync=False)  # memory: nothing to sync

    def written(self, step: int, rank: int, node_local: NodeLocalTier) -> dict[str, list]:
        """This rank's files of `step`, put on its buddy node (rank 0's metadata on every node)."""
        own = own_files(self.root / step_name(step), rank)
        for name in own:
            targets = self.servers if name == ".metadata" else [self.buddy] if self.buddy else []
            for server in targets:
                if server != self.servers[self.node_rank]:
                    peers.send(f"{server}/{step_name(step)}/{name}", self.root / step_name(step) / name)
        return own

    def listed(self, step: int) -> dict[str, list]:
        return {}  # every rank named its own files (written)

    # --- reading -----------------------------------------------------------------------------------
    def verify(self, step: int, manifest: dict, rank: int, world_size: int) -> str | None:
        return self._covered(step, self.holders(step)) if rank == 0 else None

    def reader(self, step: int, held: dict[str, Path], threads: int):
        return PeerReader(self.root / step_name(step), self.holders(step), threads)

    def remove(self, step: int) -> None:
        for server in self.servers:
            try:
                peers.remove(f"{server}/{step_name(step)}")
            except peers.PeerError:
                pass  # a node that is gone took its copy with it

    def set_aside(self, step: int) -> str:
        """A copy that fails its checks is dropped on every node: nothing of it is ever used."""
        self.remove(step)
        return "dropped on every node"

    def size(self, step: int) -> float:
        return sum(size for size, _ in json.loads(self.get(step, COMPLETE)).get("files", {}).values())

    def free_bytes(self) -> float | None:
        return None


class _PeerFileSystem(FileSystem):
    """DCP's file system over one step: a file this node holds is opened here, any other is read from
    a live node holding it, as the byte ranges DCP asks for."""

    def __init__(self, here: Path, holders: dict[str, list[tuple[str, int]]]):
        super().__init__()
        self.here, self.holders = here, holders

    def is_local(self, path) -> bool:
        return Path(path).is_file()

    def open(self, path):
        path = Path(path)
        if path.is_file():
            return open(path, "rb")
        name = str(path.relative_to(self.here))
        (server, size), *_ = self.holders.get(name) or [(None, 0)]
        if server is None:
            raise FileNotFoundError(f"no live node holds {self.here.name}/{name}")
        return io.BufferedReader(peers.RemoteFile(f"{server}/{self.here.name}/{name}", size), 1 << 20)

    @contextmanager
    def create_stream(self, path, mode):
        with self.open(path) as stream:
            yield stream


class PeerReader(TieredReader):
    """DCP's reader of a peer copy: each file from this node where held, else from a live peer; counts
    the bytes read from each. A remote file's items are read whole (the ranged read needs a local file)."""

    def __init__(self, here: Path, holders: dict, threads: int):
        fs = _PeerFileSystem(here, holders)
        local = {name: here / name for name in holders if (here / name).is_file()}
        super().__init__(here, local, threads, fs=fs, tiers=(NODE_MEMORY, PEERS))

    def _ranged(self, req) -> bool:
        name = self.storage_data[req.storage_index].relative_path
        return self.fs.is_local(self.path / name) and super()._ranged(req)
