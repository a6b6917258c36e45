"""The launcher's own settings (every key besides the recipe), as typed dataclasses: the one home of
their defaults. Hydra composes them under launcher.yaml as `launcher_settings` (config.compose)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.contract.typed import ranged

ACTIONS = ("dry_run", "submit", "server_dry_run", "status", "logs", "list", "delete", "local", "rehearse",
           "samples", "simulate")
TARGETS = ("hyperpod", "kubeflow", "trainjob")


@dataclass
class ClusterSettings:
    job_name: str | None = None  # default: recipes.run.name
    namespace: str | None = None  # default: the kube context's namespace, else "default"
    kube_context: str | None = None  # default: the current context of the kubeconfig
    image: str | None = None  # training image (see Dockerfile); required to submit
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None
    priority_class: str | None = None  # Kubernetes PriorityClass of the pods
    queue_name: str | None = None  # Kueue LocalQueue (label kueue.x-k8s.io/queue-name)
    kueue_priority: str | None = None  # Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class)
    labels: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    node_selector: dict[str, Any] = field(default_factory=dict)  # added to the instance-type selector
    tolerations: list[Any] = field(default_factory=list)
    checkpoint_pvc: str | None = None  # PersistentVolumeClaim for checkpoints, shared by all nodes
    checkpoint_mount: str = "/checkpoints"
    host_paths: dict[str, Any] = field(default_factory=dict)  # name: {path: /host/dir, mount: /container/dir}
    # name: {claim: <PersistentVolumeClaim>, mount: /container/dir}, read-only: data and models on another
    # volume, e.g. an S3 bucket through the Mountpoint for S3 CSI driver (docs/your-data.md)
    pvcs: dict[str, Any] = field(default_factory=dict)
    shm_size: str | None = None  # /dev/shm size limit, e.g. 256Gi (None: no limit)
    node_local: bool = True  # each node keeps the newest checkpoint in a memory volume (restarts read it there)
    env: dict[str, Any] = field(default_factory=dict)  # extra plain environment variables
    secret_env: dict[str, Any] = field(default_factory=dict)  # ENV_NAME: {secret: <secret name>, key: <key>}
    config_mount: str = "/config"  # where the ConfigMap of per-size training configs is mounted
    clean_pod_policy: str = "None"  # None | Running | All
    job_max_retry_count: int = ranged(3, ge=0)
    restart_eval_period: int = ranged(3600, ge=1)  # seconds over which restarts are counted
    max_restarts: int = ranged(10, ge=0)  # Kubeflow: torchrun --max-restarts
    runtime: str = "torch-distributed"  # TrainJob: the ClusterTrainingRuntime it runs on (torchrun)
    replace: bool = False  # submit: replace an existing job of the same name
    unique_name: bool = True  # submit: append a short unique suffix to the job name
    watch: bool = False  # status: refresh until the job ends
    watch_interval: float = ranged(10.0, gt=0)  # status: seconds between refreshes
    rank: Any = 0  # logs: the node rank whose log to show, or "all"
    follow: bool = False  # logs: stream, across restarts, until the job ends
    since: str | None = None  # logs: only lines newer than this duration, e.g. 10m


@dataclass
class LocalSettings:
    """`action=local` and `action=rehearse`: torchrun (or the HyperPod agent) on this machine."""

    nodes: int | None = ranged(None, ge=1)  # local: default recipes.trainer.num_nodes
    nproc_per_node: int = ranged(1, ge=1)  # processes per local "node"
    run_dir: str | None = None  # default: recipes.run.output_dir
    resume: bool = True  # start from the newest valid checkpoint in run_dir
    trace: Any = None  # rehearse: capacity events, e.g. [{step:0,nodes:2},{step:6,nodes:3}] or a YAML file
    compare: bool = True  # rehearse: also run the same steps at a fixed size and compare
    min_stable_period: float = ranged(0.0, ge=0)  # rehearse: seconds between two resizes (anti-thrashing)
    # rehearse: drive real HyperPod agents (hyperpodrun, one per node) instead of torchrun, from the
    # environment of this python (one with hyperpod-elastic-agent: `python scripts/image_venv.py` prints one)
    agent_python: str | None = None
    timeout: float = ranged(900.0, gt=0)  # hard wall-clock limit of a local run or rehearsal
    step: int | None = ranged(None, ge=1)  # samples: the step whose completions to show (default: the last)
    show: int = ranged(3, ge=1)  # samples: how many of the best and of the worst


@dataclass
class SimulateSettings:
    """`action=simulate`: the job on a capacity trace, in virtual time (see elastic_launcher/simulate/simulator.py)."""

    capacity: Any = None  # trace: list, YAML/CSV file or a name under traces/ ({time|step, nodes} or kill)
    repeat_daily: bool = False  # repeat a one-day trace (clock times) up to horizon_days
    horizon_days: float = ranged(60.0, gt=0)  # give up on a policy that has not finished by then
    steps: int | None = ranged(None, ge=1)  # default: the recipe's max_steps
    sweep: bool = False  # also try other min/max, step vs discrete sizes, scaling_timeout and snooze values
    min_stable_period: float = ranged(0.0, ge=0)  # seconds between two resizes (anti-thrashing), as local
    throughput: str | None = None  # a run directory whose metrics.jsonl gives steps/s by node count
    tokens_per_s_per_node: float = ranged(2000.0, gt=0)  # else: this rate on one node (blog: Llama-3 70B, p5)
    scaling_efficiency: float = ranged(0.956, gt=0, le=1)  # per doubling of nodes (blog: 2,000 -> 14,000 at 1 -> 8)
    costs: str | None = None  # a rehearsal_report.json whose measured resize costs replace the model below
    checkpoint_gb: float | None = ranged(None, ge=0)  # default: 12 bytes per trained parameter of known models
    write_gb_per_s: float = ranged(5.0, gt=0)  # checkpoint save bandwidth, all nodes together
    read_gb_per_s: float = ranged(10.0, gt=0)  # resharded load bandwidth, all nodes together
    graceful_stop_s: float = ranged(30.0, ge=0)  # signal -> every worker at a step boundary
    restart_s: float = ranged(120.0, ge=0)  # pods rescheduled, image started, rendezvous, model built
    warmup_s: float = ranged(60.0, ge=0)  # compilation (warm cache) and the first slow steps


@dataclass
class LauncherSettings:
    action: str = "dry_run"  # one of ACTIONS
    target: str = "hyperpod"  # hyperpod (HyperPodPyTorchJob) | kubeflow (PyTorchJob) | trainjob (Trainer v2 TrainJob)
    output_dir: str = "results"  # dry-run artifacts go to <output_dir>/<job name>/
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    simulate: SimulateSettings = field(default_factory=SimulateSettings)
