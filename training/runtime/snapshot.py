"""The model's files and the training data on this node: a local path as given, a hub id's snapshot,
or an S3 uri's objects (`s3://bucket/prefix`), fetched once per node.

Each node's local rank 0 fetches them (or finds them in the Hugging Face cache, or the S3 cache) while
the node's other ranks wait on the job's store, then every rank reads its own shards from the files
(training.model.causal_lm). Nothing waits inside a collective: a first download of a large model can outlast
the process group's timeout, so the whole job meets at a store barrier with a timeout of its own.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path

from training.contract import buckets
from training.contract.errors import ConfigError

FETCH_WAIT = timedelta(hours=6)  # a first download of a 100+ GB model on a slow link
# Top-level config, tokenizer and safetensors files only: hub repos also carry the original
# weights again in subfolders (GPT-OSS `original/`, `metal/`; Llama `original/consolidated.pth`).
IGNORED = ["*/*", "*.pth", "*.pt", "*.bin", "*.gguf", "*.msgpack", "*.h5", "*.onnx"]
_ERROR = "error: "


def s3_cache() -> Path:
    """Where a node keeps what it fetched from S3 ($ELASTIC_S3_CACHE, else ~/.cache/elastic-launcher/s3)."""
    return Path(os.environ.get("ELASTIC_S3_CACHE") or Path.home() / ".cache" / "elastic-launcher" / "s3")


def _fetch(name: str) -> str:
    if buckets.is_s3(name):
        return str(buckets.download("training_config.model_config.model_name_or_path", name, s3_cache()))
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, ignore_patterns=IGNORED)
    except Exception as e:  # noqa: BLE001 - any failure to fetch is the user's id, token or network
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"model_config.model_name_or_path={name!r} could not be fetched ({reason}): check the "
                          f"hub id, HF_TOKEN and the network, or give a local directory") from None


def local_snapshot(name: str, store, rank: int, local_rank: int, world_size: int, keep=None, fetch=_fetch) -> str:
    """The local directory holding `name`'s files (the directory itself when `name` is one), or the
    copy `keep(directory)` makes of it on this node; `fetch(name)` brings what is not here."""
    # A node's ranks are numbered contiguously: its local rank 0 is global rank `rank - local_rank`.
    node_key, job_key = f"snapshot/{name}/node-of-rank-{rank - local_rank}", f"snapshot/{name}/all-ready"
    if Path(name).is_dir() and keep is None:
        return name
    if local_rank == 0:
        try:
            path = name if Path(name).is_dir() else fetch(name)
        except ConfigError as e:  # every waiting rank, on every node, reports it too instead of waiting
            for key in (node_key, job_key):
                store.set(key, _ERROR + str(e))
            raise
        path = keep(path) if keep else path
        store.set(node_key, path)
    else:
        path = _awaited(store, node_key)
    # Every node's snapshot is ready before any rank goes on to its first collective.
    if store.add(f"snapshot/{name}/ready", 1) == world_size:
        store.set(job_key, "ready")
    _awaited(store, job_key)
    return path


def model_files(mc, topo, node_local=None) -> str | None:
    """The local directory of the model's files for this process (None: an inline architecture,
    built from its config), through the job's rendezvous store. Under LoRA, whose every start reads
    the frozen base from the files, they are read from this node's memory (`node_local`, a
    training.state.node_local.NodeLocalTier) after the node's first start."""
    if mc.architecture:
        return None
    import torch.distributed as dist

    keep = node_local.model_copy if node_local is not None and node_local.volume is not None and mc.lora else None
    return local_snapshot(mc.model_name_or_path, dist.distributed_c10d._get_default_store(), topo.rank,
                          topo.rank_in_node, topo.world_size, keep)


def data_files(ds, topo):
    """The `datasets` section as this node reads it: an S3 `train_data` (a file, or a prefix of files)
    fetched once per node into the S3 cache, anything else as given."""
    if not buckets.is_s3(ds.train_data):
        return ds
    import torch.distributed as dist

    fetch = lambda uri: str(buckets.download("training_config.datasets.train_data", uri, s3_cache()))  # noqa: E731
    local = local_snapshot(ds.train_data, dist.distributed_c10d._get_default_store(), topo.rank, topo.rank_in_node,
                           topo.world_size, fetch=fetch)
    return dataclasses.replace(ds, train_data=local)


def _awaited(store, key: str) -> str:
    store.wait([key], FETCH_WAIT)
    value = store.get(key).decode()
    if value.startswith(_ERROR):
        raise ConfigError(value[len(_ERROR):])
    return value
