"""What a node's memory holds beside the training: the node-local tier (its ranks' shards of the newest
checkpoint, training.state.node_local) and the peer copies (its own and a buddy node's shards of a
recent step, training.state.peer_store), both in each pod's memory-backed volume; how large that
volume is, whether it fits the pod, and where peer copies are on by default."""

from __future__ import annotations

import dataclasses
import math

from elastic_launcher.config.policy import Hardware
from elastic_launcher.planning.instances import InstanceType
from elastic_launcher.planning.memory import ModelShape
from elastic_launcher.planning.plan import Plan, checkpoint_gb, kept_policies
from elastic_launcher.words import plural
from training.contract.config import JobConfig
from training.contract.errors import ConfigError

NODE_LOCAL_SHARE = 0.5  # of the pod's memory the node-local checkpoint tier may take


def _checkpoint_gb(hardware: Hardware, cfg: JobConfig) -> float | None:
    mc = cfg.training_config.model_config
    try:
        return checkpoint_gb(hardware.model_shape or mc.architecture, mc, kept_policies(cfg.training_config))
    except (ConfigError, KeyError, TypeError):
        return None


def peer_copies_gib(hardware: Hardware, cfg: JobConfig, nodes: int) -> float | None:
    """Host memory per node for the peer copies (training.state.peer_store) at `nodes` nodes: its own
    ranks' share of the checkpoint and its buddy node's (on one node, its own only), twice (a copy is
    written before the previous one is dropped). None where they are off or the model's size is unknown."""
    gb = _checkpoint_gb(hardware, cfg)
    if not cfg.training_config.checkpoint.peer_steps or gb is None:
        return None
    return 2 * gb / nodes * (2 if nodes > 1 else 1) * 1e9 / 2**30


def with_peer_steps(plan: Plan, peer_steps: int) -> Plan:
    """The plan with checkpoint.peer_steps set at every size."""
    def setting(cfg: JobConfig) -> JobConfig:
        tc = cfg.training_config
        checkpoint = dataclasses.replace(tc.checkpoint, peer_steps=peer_steps)
        return dataclasses.replace(cfg, training_config=dataclasses.replace(tc, checkpoint=checkpoint))

    sizes = tuple(dataclasses.replace(s, config=setting(s.config)) for s in plan.sizes)
    return dataclasses.replace(plan, base=setting(plan.base), sizes=sizes)


def default_peer_steps(plan: Plan, node_local: bool) -> int:
    """checkpoint.peer_steps where the recipe leaves it unset: a copy every step for an elastic job that
    may run on two or more nodes, with a node memory volume the copies fit in; else none."""
    if not (plan.policy.is_elastic and plan.policy.max_nodes >= 2 and node_local):
        return 0
    trial = with_peer_steps(plan, 1)
    try:
        node_local_gib(trial.hardware, trial.base, trial.instance, trial.sizes[0].nodes)
    except ConfigError:  # they would not fit: the dry run says so where they are asked for
        return 0
    return 1


def node_local_gib(hardware: Hardware, cfg: JobConfig, instance: InstanceType, min_nodes: int) -> float | None:
    """The memory-backed volume of each pod for its node's copy of the newest checkpoint: the largest
    share a node holds (the checkpoint over the fewest nodes allowed), twice (a save writes the new
    copy before the old one is dropped), plus under LoRA the frozen base's files (2 bytes per
    parameter), plus the peer copies at the fewest nodes, with 10% to spare. None where the model's
    size is unknown."""
    mc = cfg.training_config.model_config
    config = hardware.model_shape or mc.architecture
    gb = _checkpoint_gb(hardware, cfg)
    if gb is None:
        return None
    base_gb = 2 * ModelShape.from_config(config).params / 1e9 if mc.lora and not mc.architecture else 0.0
    tier = (2 * gb / min_nodes + base_gb) * 1e9 / 2**30
    gib = max(1.0, math.ceil(tier * 1.1))
    pod_gib = instance.memory_gib
    if gib > NODE_LOCAL_SHARE * pod_gib:
        files = f", and the model files ({base_gb:,.0f} GB)" if base_gb else ""
        raise ConfigError(f"the node-local checkpoint tier needs {gib:,.0f} GiB of memory per node (twice a node's share "
                          f"of a {gb:,.0f} GB checkpoint at {plural(min_nodes, 'node')}{files}), more than "
                          f"{NODE_LOCAL_SHARE:.0%} of the {pod_gib} GiB of {instance.name}: raise "
                          f"recipes.elastic_policy.min_nodes, or set cluster.node_local=false (restarts then read every "
                          f"byte from the shared volume)")
    peer = peer_copies_gib(hardware, cfg, min_nodes)
    if peer is not None:
        gib = max(1.0, math.ceil((tier + peer) * 1.1))
        if gib > NODE_LOCAL_SHARE * pod_gib:
            raise ConfigError(
                f"training_config.checkpoint.peer_steps={cfg.training_config.checkpoint.peer_steps}: the peer copies "
                f"need {peer:,.0f} GiB of memory per node at {plural(min_nodes, 'node')} beside the node-local tier's "
                f"{tier:,.0f} GiB, more than {NODE_LOCAL_SHARE:.0%} of the {pod_gib} GiB of {instance.name}: raise "
                f"recipes.elastic_policy.min_nodes, or set recipes.training_config.checkpoint.peer_steps=0 (a failure "
                f"then resumes from the newest checkpoint)")
    return float(gib)
