"""What a Kubeflow Trainer v2 `TrainJob` (trainer.kubeflow.org/v1alpha1, as of v2.3.0) can express of a
plan, refused in one line where it cannot: it runs at a fixed size, on a runtime that runs the
job's own torchrun command, and its runtime patches carry only some pod fields."""

from __future__ import annotations

import re

from elastic_launcher.config.settings import ClusterSettings
from elastic_launcher.planning.plan import Plan
from training.contract.errors import ConfigError

RESIZING_TARGETS = ("hyperpod", "kubeflow")
# v2.3.0's stock ClusterTrainingRuntimes (manifests/base/runtimes): the one that runs torchrun with the
# job's command, and the others (other frameworks, or a fixed torchtune command).
TORCHRUN_RUNTIMES = ("torch-distributed",)
OTHER_STOCK_RUNTIMES = ("torch-distributed-with-cache", "deepspeed-distributed", "jax-distributed",
                        "mlx-distributed", "xgboost-distributed", "torchtune-llama3.2-1b", "torchtune-llama3.2-3b",
                        "torchtune-qwen2.5-1.5b")
# What the torch runtime sets for torchrun (node count, processes per node, node rank, master).
TRAINJOB_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
RFC1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # the CRD's rule on a TrainJob's name


def check_trainjob(plan: Plan, cluster: ClusterSettings) -> None:
    """What a Kubeflow Trainer v2.3 TrainJob can express, refused in one line where it cannot."""
    if plan.policy.is_elastic:
        raise ConfigError(f"target=trainjob runs at a fixed size (Kubeflow Trainer v2.3 has no elastic policy) but "
                          f"recipes.elastic_policy.is_elastic=true: set it to false (the job runs at "
                          f"recipes.trainer.num_nodes), or use target={' or target='.join(RESIZING_TARGETS)} to resize")
    if cluster.runtime in OTHER_STOCK_RUNTIMES:
        raise ConfigError(f"cluster.runtime={cluster.runtime!r} is a stock Trainer runtime that does not run the "
                          f"job's torchrun command: use cluster.runtime={TORCHRUN_RUNTIMES[0]}, or a "
                          f"ClusterTrainingRuntime of your own with mlPolicy.torch")
    if not RFC1035_LABEL.match(plan.job_name):
        raise ConfigError(f"job name {plan.job_name!r}: a TrainJob's name must start with a letter (RFC 1035): "
                          f"set cluster.job_name=<name starting with a letter>")
    defaults = ClusterSettings()
    for key in ("priority_class", "image_pull_policy"):
        if getattr(cluster, key) != getattr(defaults, key):
            raise ConfigError(f"cluster.{key}={getattr(cluster, key)!r} has no field in a TrainJob (Trainer v2.3's "
                              f"runtime patches do not carry it): set it in the ClusterTrainingRuntime, or use "
                              f"target=kubeflow")
    for name in cluster.env:
        if name in TRAINJOB_RESERVED_ENV:
            raise ConfigError(f"cluster.env.{name} is set by the TrainJob's runtime for torchrun (reserved by "
                              f"Kubeflow Trainer): remove it; the node count is recipes.trainer.num_nodes")
