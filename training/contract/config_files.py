"""What the launcher hands the trainer besides the config: the per-size config files and the env
vars it renders into the job. Torch-free."""

from __future__ import annotations

from pathlib import Path

from training.contract.errors import ConfigError

# The launcher writes BASE_CONFIG_FILE plus one file per allowed node count into a directory (a
# ConfigMap mounted at /config on a cluster); the trainer picks the file for its node count and
# falls back to the base file (with derived batch math) for a count that has none.
BASE_CONFIG_FILE = "config.yaml"
CONFIG_DIR_ENV = "ELASTIC_CONFIG_DIR"
# Local runs simulate N nodes inside one torchrun; without it nodes = WORLD_SIZE / LOCAL_WORLD_SIZE.
NUM_NODES_ENV = "ELASTIC_NUM_NODES"
# How long a worker whose peers stopped waits for its own node's stop signal under the HyperPod
# agent: the policy's graceful_shutdown_timeout, rendered into the job's env. Its default here is
# the policy's default (elastic_launcher.planning.plan.ElasticPolicy) and the trainer's fallback.
STOP_WAIT_ENV = "ELASTIC_STOP_WAIT_S"
GRACEFUL_SHUTDOWN_TIMEOUT_S = 600
# Set with hyperpodrun --inprocess-restart (elastic_policy.in_place): every worker the agent starts,
# first or after a fallback restart, waits at the agent's barrier for its rank (training.runtime.in_place).
IN_PLACE_ENV = "ELASTIC_IN_PLACE"
# The node's own copy of the newest checkpoint (training.state.node_local): a memory-backed volume of
# the pod, which outlives the training processes (a resize restarts them in the pod), not the pod.
# `{node_rank}` in it is replaced by the node's rank (local runs keep one directory per emulated node).
NODE_LOCAL_DIR_ENV = "ELASTIC_NODE_LOCAL_DIR"
NODE_LOCAL_MOUNT = "/node-local"


def config_file_for(nodes: int) -> str:
    return f"config-n{nodes}.yaml"


def select_config_file(config_dir: str | Path, nodes: int) -> tuple[Path, bool]:
    """The config file for `nodes`, and whether it is a per-size file (False: the base fallback)."""
    config_dir = Path(config_dir)
    sized = config_dir / config_file_for(nodes)
    if sized.is_file():
        return sized, True
    base = config_dir / BASE_CONFIG_FILE
    if not base.is_file():
        raise ConfigError(f"no {config_file_for(nodes)} or {BASE_CONFIG_FILE} in config dir '{config_dir}': "
                          f"point --config-dir (or ${CONFIG_DIR_ENV}) at the launcher's rendered configs")
    return base, False
