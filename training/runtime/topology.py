"""Where this process stands in the job: its rank, its node's local rank, the world size and the
node count, read from the environment torchrun / hyperpodrun set on every (re)start, and the
process group every entrypoint (training, export) starts from it. Torch-free until that start."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from training.contract.config_files import NUM_NODES_ENV


@dataclass(frozen=True)
class Topology:
    rank: int
    local_rank: int
    world_size: int
    nodes: int

    @property
    def node_rank(self) -> int:
        return self.rank // max(1, self.world_size // self.nodes)

    @property
    def rank_in_node(self) -> int:
        """This rank's place among its node's ranks: the local rank, also where a local run emulates
        several nodes in one torchrun (whose local ranks then span them all)."""
        return self.rank % max(1, self.world_size // self.nodes)

    @classmethod
    def from_env(cls) -> "Topology":
        if "WORLD_SIZE" not in os.environ:  # plain `python -m training`: a world of one
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        world = int(os.environ["WORLD_SIZE"])
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        nodes = int(os.environ.get(NUM_NODES_ENV) or max(1, world // local_world))
        return cls(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)), world, nodes)


PG_TIMEOUT_ENV = "ELASTIC_PG_TIMEOUT_S"


def collective_timeout(save_timeout: float | None = None) -> float:
    """Seconds a collective may wait (ELASTIC_PG_TIMEOUT_S, default 30 minutes). It must outlast a
    checkpoint write (`save_timeout`) by a margin: the ranks that finished their write wait in a
    collective for the slow one, whose own timeout must fire first and name the checkpoint."""
    from training.contract.errors import ConfigError

    margin = 300.0
    default = max(1800.0, (save_timeout or 0) + margin)
    timeout = float(os.environ.get(PG_TIMEOUT_ENV, default))
    if save_timeout is not None and timeout < save_timeout + margin:
        raise ConfigError(f"{PG_TIMEOUT_ENV}={timeout:g} must exceed checkpoint.save_timeout={save_timeout:g} by "
                          f"{margin:g}s, or a slow checkpoint write fails as a collective timeout: raise it or unset it")
    return timeout


JOIN_TIMEOUT_ENV = "ELASTIC_JOIN_TIMEOUT_S"
JOINED_KEY = "elastic/joined/"  # + rank: set by each rank once it reached the store


class GroupFormationError(RuntimeError):
    """The ranks of this world size did not all reach the rendezvous store in time: one line naming
    the store and the ranks waited for; the process exits non-zero and its agent restarts it."""


def join_timeout() -> float:
    """Seconds every rank of a new world size may take to reach the rendezvous store
    (ELASTIC_JOIN_TIMEOUT_S, default 5 minutes): a worker whose peers never come exits instead of
    waiting out the collective timeout."""
    return float(os.environ.get(JOIN_TIMEOUT_ENV, 300))


def _master_store_listens(address: tuple[str, int], timeout_s: float) -> bool:
    """Wait (polling every 10 ms) until rank 0's rendezvous store listens. torch's own connect backs
    off for up to a second after a refused attempt, so a rank released a moment before rank 0 (every
    /start of the HyperPod agent, whose store the workers cannot share) would wait that out on every
    restart. Under torchrun the agent's store already listens and this returns at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(address, timeout=1).close()
            return True
        except OSError:
            time.sleep(0.01)
    return False


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5": a node's missing ranks in a few characters."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


_hosted_server = None  # the rendezvous server this process hosts for its current group (rank 0)


def rendezvous_store(topo: Topology, timeout_s: float):
    """A connection to the store this world size's process group forms through, once every rank has
    reached it.

    Rank 0 hosts the store (torchrun's agent does where TORCHELASTIC_USE_AGENT_STORE is True), and
    the server belongs to this module, not to the group: a process that stays through an in-place
    resize re-forms its group on the same port, and torch's caches keep a destroyed group alive (a
    DTensor spec its mesh, the mesh its groups, a group its store). Held there, the old server went on
    listening, torch's multi-tenant store handed it to the new group with the old group's keys, and
    the new group waited forever for the old addresses. So every rank connects as a client,
    `end_process_group` stops the server, and a server still listening makes the next one fail to
    bind at once. Every rank then counts itself in and waits at most `timeout_s` for the others."""
    from datetime import timedelta

    import torch.distributed as dist

    global _hosted_server
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    where = f"{address}:{port} (MASTER_ADDR:MASTER_PORT)"
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    timeout = timedelta(seconds=timeout_s)
    if topo.rank == 0 and not agent_store:
        try:
            _hosted_server = dist.TCPStore(address, port, topo.world_size, is_master=True, timeout=timeout,
                                           wait_for_workers=False, multi_tenant=False)
        except dist.DistNetworkError as e:
            raise GroupFormationError(f"rank 0 cannot host the rendezvous store at {where}: "
                                      f"{str(e).splitlines()[0]}; is another process holding the port?") from None
    elif not _master_store_listens((address, port), timeout_s):
        raise GroupFormationError(f"rank {topo.rank} could not reach the rendezvous store at {where} (rank 0's) "
                                  f"within {JOIN_TIMEOUT_ENV}={timeout_s:g}s: exiting so the agent restarts this worker")
    store = dist.TCPStore(address, port, topo.world_size, is_master=False, timeout=timeout)
    if agent_store:
        return store  # torchrun's agent formed the worker group already; its store outlives every round
    store.set(f"{JOINED_KEY}{topo.rank}", "1")
    everyone = [f"{JOINED_KEY}{r}" for r in range(topo.world_size)]
    began = time.monotonic()
    while not store.check(everyone):  # polled: a timed-out store.wait also logs torch's socket warnings
        waited = time.monotonic() - began
        if waited > timeout_s:
            missing = [r for r in range(topo.world_size) if not store.check([everyone[r]])]
            raise GroupFormationError(
                f"rank {topo.rank} waited {timeout_s:g}s ({JOIN_TIMEOUT_ENV}) at the rendezvous store {where} for "
                f"rank(s) {_ranges(missing)} of {topo.world_size}, which never joined: exiting so the agent "
                f"restarts this worker")
        time.sleep(min(0.01 + waited / 10, 0.5))  # peers a moment apart are seen at once; slow ones load no store
    return store


def start_process_group(topo: Topology, timeout_s: float | None = None):
    """This process's device (its local GPU, else the CPU) with the default process group started:
    NCCL for GPU tensors beside gloo for CPU ones, gloo alone on CPU. Its ranks meet at the
    rendezvous store within `join_timeout()`; `timeout_s` (default: `collective_timeout()`) bounds a
    collective that never completes."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", topo.local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s or collective_timeout())
    store = rendezvous_store(topo, join_timeout())
    store.set_timeout(timeout)
    # The prefix torch's own env:// start gives the default group's keys.
    dist.init_process_group("cpu:gloo,cuda:nccl" if on_gpu else "gloo", store=dist.PrefixStore("default_pg", store),
                            rank=topo.rank, world_size=topo.world_size, timeout=timeout,
                            device_id=device if on_gpu else None)
    return device


def end_process_group() -> None:
    """Destroy the default group, stop the rendezvous server this process hosted for it (the port is
    free for the next world size's group: an in-place resize) and empty DTensor's caches of the
    group's mesh. Those caches are keyed by meshes, and a mesh equals any other over as many ranks
    whatever this process's rank in it: a process that comes back to a world size it trained at with
    another rank would be handed specs (and their mesh coordinate: which shard is its own) of the
    rank it was. Measured: a checkpoint plan that names one rank's shard twice and another's never."""
    import torch.distributed as dist
    from torch.distributed.tensor._redistribute import _gen_transform_infos
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    global _hosted_server
    dist.destroy_process_group()
    _hosted_server = None
    _clear_sharding_prop_cache()  # torch's own way to clear both sharding-propagation caches
    ShardingPropagator._propagate_tensor_meta_cached.cache_clear()
    _gen_transform_infos.cache_clear()  # redistribution plans: their local shapes follow the coordinate


def device_mesh(topo: Topology, device, shard_degree: int):
    """The mesh the model is sharded over: 1-D for FSDP; (replicas x shard_degree) for HSDP, whose
    replicas each hold the whole state sharded over `shard_degree` GPUs."""
    from torch.distributed.device_mesh import init_device_mesh

    world = topo.world_size
    if shard_degree < world:
        return init_device_mesh(device.type, (world // shard_degree, shard_degree), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device.type, (world,))
