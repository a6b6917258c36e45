"""The recipe's blocks about where and how elastically it runs, as the launcher reads them: its
`elastic_policy` and its hardware facts (composed in elastic_launcher.config.compose, planned in
elastic_launcher.planning.plan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training.contract.config_files import GRACEFUL_SHUTDOWN_TIMEOUT_S
from training.contract.typed import ranged


@dataclass
class ElasticPolicy:
    """The recipe's `elastic_policy` block (the sagemaker-hyperpod-recipes keys, off by default)."""

    is_elastic: bool = False
    min_nodes: int = 1
    max_nodes: int = 1
    replica_increment_step: int | None = None
    replica_discrete_values: list[int] | None = None  # default: scale_config node counts in [min, max]
    use_graceful_shutdown: bool = True
    graceful_shutdown_timeout: int = ranged(GRACEFUL_SHUTDOWN_TIMEOUT_S, ge=0)  # seconds to checkpoint and exit after SIGUSR1
    scaling_timeout: int = ranged(600, ge=0)  # capacity must stay available this long before a scale-up
    faulty_timeout: int = ranged(300, ge=0)  # wait for replacement capacity before scaling down after a fault
    scale_up_snooze_time: int = ranged(0, ge=0)  # no scale-up for this long after a restart
    # Resize in place (HyperPod only): the agent's in-process restart keeps the workers of staying pods
    # alive through a resize; a worker that cannot rejoin within graceful_shutdown_timeout is restarted.
    in_place: bool = False


@dataclass
class Hardware:
    """The recipe's top-level hardware facts: what its scale configs were sized for, and the shape of
    its model (the launcher reads no model hub) for the memory estimate."""

    instance_types: list[str] | None = None  # None: any; else the dry run warns outside this list
    model_shape: dict[str, Any] | None = None  # transformers config keys (hidden_size, ...); default: the architecture
