"""The trainer's side of peer copies (training.state.peer_store): the node's server, the copies'
checkpointer, and at a start the choice between the newest peer copy and the newest durable checkpoint."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict, replace

import torch.distributed as dist

from training.contract.checkpoint_dirs import COMPLETE, step_name

from training.runtime.topology import Topology
from training.state.checkpoint import Checkpointer, CheckpointError, TrainState
from training.state.checkpoint_files import STATE_FILE
from training.state.node_local import NodeLocalTier
from training.state.peer_server import NodeServer
from training.state.peer_store import PEER_DIR, PeerStore


class NoCopies:
    """What the trainer holds where peer copies are off."""

    writing = pending = False

    def due(self, step: int) -> bool:
        return False

    def close(self) -> None:
        pass


class PeerCheckpointer(Checkpointer):
    """The peer copies' checkpointer: a copy is staged at the step's end like an async save, and the
    rest happens in the background on the copies' own process group, off the training's path: every
    rank writes and puts its shards on its buddy, the ranks agree that all did, rank 0 puts the
    manifest on every node (the copy is complete: a failure from here on resumes from it), and each
    node drops its older copies. A copy that fails anywhere is never completed (the previous one stays);
    the trainer is told by a warning, not an error: the durable checkpoints are untouched."""

    def __init__(self, every: int, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.every = every
        self._copied: TrainState | None = None
        self._warned = False

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def save(self, model, optimizer, state: TrainState, blocking: bool = False, sync_later: bool = False,
             method: dict | None = None) -> str:
        self.wait()
        self._copied = replace(state)  # what the manifest's train state says (training goes on mutating `state`)
        return super().save(model, optimizer, state, method=method)

    def _write(self, app: dict, step: int, group, sync: bool = True) -> dict[str, list]:
        problem = None
        try:
            own = super()._write(app, step, group, sync)
        except Exception as e:  # noqa: BLE001 - every rank must hear of it before any completes the copy
            own, problem = {}, f"rank {self.rank}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
        results: list = [None] * self.world_size
        dist.all_gather_object(results, (own, problem), group=group)
        if failed := next((p for _, p in results if p), None):
            raise CheckpointError(f"the peer copy of step {step} failed ({failed}); the previous copy stays")
        if self.rank == 0:
            files = {name: entry for own, _ in results for name, entry in own.items()}
            self.store.put(step, STATE_FILE, json.dumps(asdict(self._copied)).encode())
            self.store.put(step, COMPLETE, json.dumps({"files": files}).encode())  # last: the copy exists
        dist.barrier(group=group)
        self.store.drop_older(step)
        return own

    def wait(self, sync: bool = True) -> None:
        """The copy in flight finished (completed, or failed with a warning)."""
        if not self._pending:
            return
        future, step, _, started = self._pending
        self._pending = None
        try:
            future.result(timeout=self.timeout_s)
            self.last_saved = (step, time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - a copy is a help, not the run's state of record
            if self.rank == 0 and not self._warned:
                print(f"warning: {str(e).strip().splitlines()[-1][:400]} (said once)", file=sys.stderr, flush=True)
                self._warned = True


def _address() -> str:
    """The address the other nodes reach this one at: the pod's own (its hostname resolves to it in
    Kubernetes), loopback where the whole job runs on one machine."""
    if os.environ.get("MASTER_ADDR", "127.0.0.1") in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def peer_checkpointer(process, topo: Topology, node_local: NodeLocalTier, peer_steps: int, on_gpu: bool,
                      model_options) -> PeerCheckpointer | NoCopies:
    """The peer copies' checkpointer, every node's server started and known to every rank (a
    collective); NoCopies where they are off, or where the job has no node memory volume to keep them in."""
    if not peer_steps:
        return NoCopies()
    if node_local.volume is None:
        if topo.rank == 0:  # the launcher refuses this for a rendered job: only a local run gets here
            print(f"peer copies: off (checkpoint.peer_steps={peer_steps}, but no node memory volume: "
                  f"ELASTIC_NODE_LOCAL_DIR is not set); a failure resumes from the newest checkpoint", flush=True)
        return NoCopies()
    root = node_local.volume / PEER_DIR
    if topo.rank_in_node == 0 and process.peer_server is None:  # one per node, for the process's life
        process.peer_server = NodeServer(root, _address())
    served: list = [None] * topo.world_size
    dist.all_gather_object(served, (topo.node_rank, process.peer_server.url if topo.rank_in_node == 0 else None))
    servers = dict(s for s in served if s[1] is not None)
    store = PeerStore(root, [servers[n] for n in range(topo.nodes)], topo.node_rank)
    return PeerCheckpointer(peer_steps, store, keep_last=1, async_save=True, rank=topo.rank, world_size=topo.world_size,
                        on_gpu=on_gpu, model_options=model_options)


def _newest(durable: Checkpointer, peer) -> tuple[Checkpointer | None, str]:
    """Which checkpointer a start resumes from (None: nothing to resume), and the line that says why:
    the peer copies where their newest whole step is newer than the newest durable checkpoint."""
    newest = durable.newest_step()
    copied = peer.newest_step() if isinstance(peer, PeerCheckpointer) else None
    if copied is not None and (newest is None or copied > newest):
        durable_named = step_name(newest) if newest is not None else "none"
        return peer, f"from the peer copies (the newest durable checkpoint: {durable_named})"
    why = ""
    if isinstance(peer, PeerCheckpointer) and copied is None:  # a copy newer than the checkpoint, not restorable
        short: list = [peer.store.shortfall(newer_than=newest) if durable.rank == 0 else None]
        dist.broadcast_object_list(short, src=0)
        why = f"; the peer copies cannot restore it: {short[0]}" if short[0] else ""
    return (durable if newest is not None else None), f"from the durable checkpoint{why}"


def load_newest(durable: Checkpointer, peer, build, load) -> tuple[Checkpointer | None, TrainState | None, str]:
    """(where the state came from, the state, why): the model built (`build(resuming)`) and the newest
    state loaded into it (`load(checkpointer)`); a peer copy that fails its checks (it is dropped)
    falls back to the durable checkpoint, and where nothing loads the model is built afresh."""
    source, whence = _newest(durable, peer)
    build(resuming := source is not None)
    state = load(source) if resuming else None
    if state is None and source is peer:
        whence = "from the durable checkpoint; the peer copy failed its checks"
        source = durable if durable.newest_step() is not None else None
        state = load(source) if source is not None else None
    if state is None and resuming:  # every checkpoint failed verification: the skeleton holds no weights
        build(False)
    return source, state, whence
