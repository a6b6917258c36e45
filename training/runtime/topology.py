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


def _await_master_store(timeout_s: float = 60.0) -> None:
    """Wait (polling every 10 ms) until rank 0's rendezvous store listens. torch's own connect backs
    off for up to a second after a refused attempt, so a rank released a moment before rank 0 (every
    /start of the HyperPod agent, whose store the workers cannot share) would wait that out on every
    restart. Under torchrun the agent's store already listens and this returns at once."""
    address = (os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", 0)))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(address, timeout=1).close()
            return
        except OSError:
            time.sleep(0.01)  # then torch's connect reports what is wrong, with its own timeout


def start_process_group(topo: Topology, timeout_s: float | None = None):
    """This process's device (its local GPU, else the CPU) with the default process group started:
    NCCL for GPU tensors beside gloo for CPU ones, gloo alone on CPU. `timeout_s` (default:
    `collective_timeout()`) bounds a collective that never completes."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", topo.local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s or collective_timeout())
    if topo.rank != 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        _await_master_store()
    dist.init_process_group("cpu:gloo,cuda:nccl" if on_gpu else "gloo", timeout=timeout,
                            device_id=device if on_gpu else None)
    return device


def device_mesh(topo: Topology, device, shard_degree: int):
    """The mesh the model is sharded over: 1-D for FSDP; (replicas x shard_degree) for HSDP, whose
    replicas each hold the whole state sharded over `shard_degree` GPUs."""
    from torch.distributed.device_mesh import init_device_mesh

    world = topo.world_size
    if shard_degree < world:
        return init_device_mesh(device.type, (world // shard_degree, shard_degree), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device.type, (world,))
