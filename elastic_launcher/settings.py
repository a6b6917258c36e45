"""The launcher's own settings (everything in launcher.yaml besides the recipe), as typed dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.config import ranged

ACTIONS = ("dry_run", "submit", "server_dry_run", "status", "delete", "local", "rehearse")
TARGETS = ("hyperpod", "kubeflow")


@dataclass
class ClusterSettings:
    job_name: str | None = None
    namespace: str | None = None
    kube_context: str | None = None
    image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None
    priority_class: str | None = None
    queue_name: str | None = None
    kueue_priority: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    node_selector: dict[str, Any] = field(default_factory=dict)
    tolerations: list[Any] = field(default_factory=list)
    checkpoint_pvc: str | None = None
    checkpoint_mount: str = "/checkpoints"
    host_paths: dict[str, Any] = field(default_factory=dict)
    shm_size: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    secret_env: dict[str, Any] = field(default_factory=dict)
    config_mount: str = "/config"
    clean_pod_policy: str = "None"
    job_max_retry_count: int = ranged(3, ge=0)
    restart_eval_period: int = ranged(3600, ge=1)
    max_restarts: int = ranged(10, ge=0)
    replace: bool = False
    unique_name: bool = True


@dataclass
class LocalSettings:
    """`action=local` and `action=rehearse`: torchrun on this machine."""

    nodes: int | None = ranged(None, ge=1)  # local: default recipes.trainer.num_nodes
    nproc_per_node: int = ranged(1, ge=1)  # processes per local "node"
    run_dir: str | None = None  # default: recipes.run.output_dir
    resume: bool = True  # start from the newest valid checkpoint in run_dir
    trace: Any = None  # rehearse: capacity events (list or YAML file), see README
    compare: bool = True  # rehearse: also run the same steps at a fixed size and compare
    min_stable_period: float = ranged(0.0, ge=0)  # rehearse: seconds between two resizes (anti-thrashing)
    timeout: float = ranged(900.0, gt=0)  # hard wall-clock limit of a local run or rehearsal


@dataclass
class LauncherSettings:
    action: str = "dry_run"
    target: str = "hyperpod"
    output_dir: str = "results"
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
