"""The trainer's side of peer copies (training.state.peer_store): the node's server, the copies'
checkpointer, and at a start the choice between the newest peer copy and the newest durable checkpoint."""

from __future__ import annotations

import os
import socket
import sys

import torch.distributed as dist

from training.runtime.topology import Topology
from training.state.checkpoint import Checkpointer
from training.state.node_local import NodeLocalTier
from training.state.peer_server import NodeServer
from training.state.peer_store import PEER_DIR, PeerStore


def _address() -> str:
    """The address the other nodes reach this one at: the pod's own (its hostname resolves to it in
    Kubernetes), loopback where the whole job runs on one machine."""
    if os.environ.get("MASTER_ADDR", "127.0.0.1") in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def peer_checkpointer(process, topo: Topology, node_local: NodeLocalTier, peer_steps: int, on_gpu: bool,
                      model_options) -> Checkpointer | None:
    """The peer copies' checkpointer, every node's server started and known to every rank (a
    collective); None where they are off, or where the job has no node memory volume to keep them in."""
    if not peer_steps:
        return None
    if node_local.volume is None:
        if topo.rank == 0:
            print(f"warning: training_config.checkpoint.peer_steps={peer_steps} but this job has no node memory "
                  f"volume (cluster.node_local=false): no peer copies; a failure resumes from the newest checkpoint",
                  file=sys.stderr, flush=True)
        return None
    root = node_local.volume / PEER_DIR
    if topo.rank_in_node == 0 and process.peer_server is None:  # one per node, for the process's life
        process.peer_server = NodeServer(root, _address())
    served: list = [None] * topo.world_size
    dist.all_gather_object(served, (topo.node_rank, process.peer_server.url if topo.rank_in_node == 0 else None))
    servers = dict(s for s in served if s[1] is not None)
    store = PeerStore(root, [servers[n] for n in range(topo.nodes)], topo.node_rank)
    return Checkpointer(store, keep_last=1, async_save=True, rank=topo.rank, world_size=topo.world_size,
                        on_gpu=on_gpu, model_options=model_options)


def resume_source(durable: Checkpointer, peer: Checkpointer | None) -> tuple[Checkpointer | None, str]:
    """Which checkpointer a start resumes from (None: nothing to resume), and the line that says why:
    the peer copies where their newest whole step is newer than the newest durable checkpoint."""
    newest = durable.newest_step()
    copied = peer.newest_step() if peer is not None else None
    if copied is not None and (newest is None or copied > newest):
        durable_named = f"step-{newest:08d}" if newest is not None else "none"
        return peer, f"from the peer copies (the newest durable checkpoint: {durable_named})"
    why = ""
    if peer is not None and copied is None:  # a copy newer than the checkpoint that the live nodes cannot restore
        short: list = [peer.store.shortfall(newer_than=newest) if durable.rank == 0 else None]
        dist.broadcast_object_list(short, src=0)
        why = f"; the peer copies cannot restore it: {short[0]}" if short[0] else ""
    return (durable if newest is not None else None), f"from the durable checkpoint{why}"
