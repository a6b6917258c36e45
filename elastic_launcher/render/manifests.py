"""Plan -> manifests: through the Jinja templates in templates/, one multi-document YAML (the
ConfigMap of per-size configs + the job) ready for `kubectl apply -f`."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from functools import cached_property

import jinja2
import yaml

from elastic_launcher import ROOT
from elastic_launcher.config.settings import ClusterSettings
from elastic_launcher.planning.node_memory import node_local_gib
from elastic_launcher.planning.plan import Plan
from elastic_launcher.planning.rollouts import check_cluster_rollouts
from elastic_launcher.render.configs import config_files, dump_yaml
from elastic_launcher.render.trainjob import check_trainjob
from training.contract.config_files import IN_PLACE_ENV, NODE_LOCAL_DIR_ENV, NODE_LOCAL_MOUNT, STOP_WAIT_ENV
from training.contract.errors import ConfigError
from training.contract.methods import sampling_options

CONFIGMAP_LIMIT = 1024 * 1024  # Kubernetes rejects ConfigMaps over 1 MiB
TEMPLATES = {"hyperpod": "hyperpod_job.yaml.j2", "kubeflow": "kubeflow_job.yaml.j2", "trainjob": "trainjob.yaml.j2"}
TRAINING_COMMAND = ["-m", "training"]  # the entrypoint module, run by hyperpodrun / torchrun
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY", re.IGNORECASE)
MANAGED_BY = {"app.kubernetes.io/managed-by": "elastic-launcher"}  # on every job and pod this launcher renders
MANAGED_BY_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())  # finds them again
AGENT_PORT = 8080  # the HyperPod elastic agent's API, called by the operator


@dataclass(frozen=True)
class Rendered:
    configs: dict[str, str]  # file name -> resolved training config (YAML)
    manifest: str  # ConfigMap + job, multi-document YAML

    @cached_property
    def objects(self) -> list[dict]:
        return [doc for doc in yaml.safe_load_all(self.manifest) if doc]


def _yaml_filter(value, indent: int = 2) -> str:
    """Nested data as block YAML starting on the next line, indented; empty values stay inline."""
    if not value:
        return " " + json.dumps(value)
    text = dump_yaml(value).rstrip("\n")
    return "\n" + "\n".join(" " * indent + line for line in text.splitlines())


# Compiled templates are cached on disk (keyed by source), sparing every dry run the compile.
_env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "templates"), undefined=jinja2.StrictUndefined,
                          keep_trailing_newline=True, bytecode_cache=jinja2.FileSystemBytecodeCache())
_env.filters["yaml"] = _yaml_filter
_env.filters["json"] = json.dumps


def configmap_name(job_name: str) -> str:
    return f"training-config-{job_name}"


def _label_value(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", ".", text)[:63].strip("-_.")


def _env_list(plan: Plan, cluster: ClusterSettings, target: str, node_local: float | None) -> list[dict]:
    env = {"PYTHONUNBUFFERED": "1", **({NODE_LOCAL_DIR_ENV: NODE_LOCAL_MOUNT} if node_local else {})}
    if plan.instance.gpus:
        # Segments that grow in place: FSDP's gathers and the bucketed widths' varied blocks fragment
        # the caching allocator much less (the plan's allowance counts 5%).
        env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
    if target == "hyperpod":
        # hyperpodrun's rendezvous reads NNODES when it starts (KeyError without it); the live node
        # count and rank come from the operator's /start, so the initial size is the honest value.
        env.update({"NNODES": str(plan.initial_nodes), "NPROC_PER_NODE": str(plan.nproc_per_node),
                    # how long a worker whose peers stopped waits for its own agent's stop signal
                    STOP_WAIT_ENV: str(plan.policy.graceful_shutdown_timeout)})
        if plan.policy.in_place:
            env[IN_PLACE_ENV] = "1"
    if target == "hyperpod" and plan.policy.is_elastic and plan.policy.use_graceful_shutdown:
        # Without it the agent's elastic_event_detected() always answers False.
        env["HYPERPOD_SIGNAL_COORDINATION"] = "distributed"
    if target == "kubeflow":
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # c10d scale-up hangs on a shared store
    if plan.instance.efa:
        env.update({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"})
    return [{"name": k, "value": v} for k, v in env.items()] + cluster_env(cluster)


def cluster_env(cluster: ClusterSettings) -> list[dict]:
    """The user's variables (cluster.env) and Secret references (cluster.secret_env), as a container's env."""
    out = []
    for name, value in cluster.env.items():
        if SECRET_NAME.search(str(name)):
            raise ConfigError(f"cluster.env.{name} looks like a secret: reference a Kubernetes Secret with "
                              f"cluster.secret_env.{name}={{secret: <name>, key: <key>}} instead of plain text")
        out.append({"name": str(name), "value": str(value)})
    for name, ref in cluster.secret_env.items():
        if not isinstance(ref, dict) or set(ref) != {"secret", "key"}:
            raise ConfigError(f"cluster.secret_env.{name}={ref!r} must be {{secret: <secret name>, key: <key>}}: "
                              f"secrets are referenced, never written into the manifest")
        out.append({"name": str(name), "valueFrom": {"secretKeyRef": {"name": ref["secret"], "key": ref["key"]}}})
    return out


def node_local_size(plan: Plan, cluster: ClusterSettings) -> float | None:
    """GiB of the memory volume each pod gives its node-local checkpoint tier (None: no tier)."""
    if not cluster.node_local:
        if peer_steps := plan.base.training_config.checkpoint.peer_steps:
            raise ConfigError(f"training_config.checkpoint.peer_steps={peer_steps} keeps its copies in each pod's memory "
                              f"volume, and cluster.node_local=false gives it none: set cluster.node_local=true, or "
                              f"recipes.training_config.checkpoint.peer_steps=0")
        return None
    return node_local_gib(plan.hardware, plan.base, plan.instance, plan.sizes[0].nodes)


def _volumes(cluster: ClusterSettings, job_name: str, node_local: float | None) -> tuple[list[dict], list[dict]]:
    shm = {"medium": "Memory", **({"sizeLimit": cluster.shm_size} if cluster.shm_size else {})}
    volumes = [{"name": "training-config", "configMap": {"name": configmap_name(job_name)}},
               {"name": "shm", "emptyDir": shm}]
    mounts = [{"name": "training-config", "mountPath": cluster.config_mount, "readOnly": True},
              {"name": "shm", "mountPath": "/dev/shm"}]
    if node_local:  # survives the training processes' restart in the pod (a resize), not the pod
        volumes.append({"name": "node-local", "emptyDir": {"medium": "Memory", "sizeLimit": f"{node_local:.0f}Gi"}})
        mounts.append({"name": "node-local", "mountPath": NODE_LOCAL_MOUNT})
    if cluster.checkpoint_pvc:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": cluster.checkpoint_pvc}})
        mounts.append({"name": "checkpoints", "mountPath": cluster.checkpoint_mount})
    for name, spec in cluster.host_paths.items():
        if not isinstance(spec, dict) or set(spec) != {"path", "mount"}:
            raise ConfigError(f"cluster.host_paths.{name}={spec!r} must be {{path: <host dir>, mount: <container dir>}}")
        volumes.append({"name": str(name), "hostPath": {"path": spec["path"], "type": "DirectoryOrCreate"}})
        mounts.append({"name": str(name), "mountPath": spec["mount"]})
    for name, spec in cluster.pvcs.items():
        if not isinstance(spec, dict) or set(spec) != {"claim", "mount"}:
            raise ConfigError(f"cluster.pvcs.{name}={spec!r} must be {{claim: <PersistentVolumeClaim>, mount: <container dir>}}")
        volumes.append({"name": str(name), "persistentVolumeClaim": {"claimName": spec["claim"], "readOnly": True}})
        mounts.append({"name": str(name), "mountPath": spec["mount"], "readOnly": True})
    return volumes, mounts


def check_judge_key(plan: Plan, cluster: ClusterSettings) -> None:
    """An OpenAI-compatible judge's key reaches the pods from a Secret (never the manifest's text)."""
    from training.contract.judge import KEY, NAME

    options = sampling_options(plan.base.training_config)
    if options is None or NAME not in (options.rewards or ()) or not (options.judge or {}).get("api_key_env"):
        return
    require_secret(f"{KEY}.api_key_env", options.judge["api_key_env"], cluster)


def require_secret(setting: str, name: str, cluster: ClusterSettings) -> None:
    """The variable `setting` names reaches the pods from a Secret (never the manifest's text)."""
    if name not in cluster.secret_env:
        raise ConfigError(f"{setting}={name}: no cluster.secret_env.{name} gives the pods the key: set "
                          f"cluster.secret_env.{name}={{secret: <Secret name>, key: <key in it>}}")


def render(plan: Plan, cluster: ClusterSettings, target: str, namespace: str, recipe: str) -> Rendered:
    check_cluster_rollouts(plan.base.training_config, plan.instance)
    check_judge_key(plan, cluster)
    if target not in TEMPLATES:
        raise ConfigError(f"target={target!r} is not one of {', '.join(TEMPLATES)}")
    if target == "trainjob":
        check_trainjob(plan, cluster)
    if plan.policy.in_place and target != "hyperpod":
        raise ConfigError(f"elastic_policy.in_place=true needs the HyperPod agent's in-process restart, which "
                          f"target={target} has not: use target=hyperpod, or in_place=false for a process restart")
    configs = config_files(plan)
    labels = {**MANAGED_BY, "elastic-launcher/recipe": _label_value(recipe),
              **{str(k): str(v) for k, v in cluster.labels.items()}}
    if cluster.queue_name:
        labels["kueue.x-k8s.io/queue-name"] = cluster.queue_name
    if cluster.kueue_priority:
        labels["kueue.x-k8s.io/priority-class"] = cluster.kueue_priority
    node_local = node_local_size(plan, cluster)
    volumes, mounts = _volumes(cluster, plan.job_name, node_local)
    agent_args = []
    if target == "hyperpod":
        # hyperpodrun rejects MIN:MAX; the operator tells it the live node count on every start.
        # --shutdown-timeout: on pod deletion the agent SIGTERMs the workers, which checkpoint; give
        # them the policy's graceful timeout (the pod's termination grace period is 30 s longer).
        agent_args = [f"--nnodes={plan.initial_nodes}", f"--nproc-per-node={plan.nproc_per_node}",
                      f"--shutdown-timeout={plan.policy.graceful_shutdown_timeout}",
                      "--log-dir=/tmp/hyperpod", "--redirects=3", "--tee=3"]
        if plan.policy.in_place:
            # Staying workers save, then wait at the agent's barrier; one that is not there within the
            # graceful timeout is restarted with its node's other workers (a process restart).
            agent_args += ["--inprocess-restart", f"--inprocess-timeout={plan.policy.graceful_shutdown_timeout}"]
    context = {
        "job_name": plan.job_name, "namespace": namespace, "labels": labels, "cluster": asdict(cluster),
        "pod_labels": {**MANAGED_BY, "elastic-launcher/job": plan.job_name},
        "policy": asdict(plan.policy), "allowed_nodes": [s.nodes for s in plan.sizes],
        "initial_nodes": plan.initial_nodes, "nproc_per_node": plan.nproc_per_node,
        "termination_grace_seconds": plan.policy.graceful_shutdown_timeout + 30,
        "node_selector": {"node.kubernetes.io/instance-type": plan.instance.name, **cluster.node_selector},
        "command": ["hyperpodrun" if target == "hyperpod" else "torchrun"],
        "args": agent_args + TRAINING_COMMAND + [f"--config-dir={cluster.config_mount}"],
        "env": _env_list(plan, cluster, target, node_local),
        "ports": [{"containerPort": AGENT_PORT, "name": "elastic-agent"}] if target == "hyperpod" else [],
        "resources": plan.instance.resources(), "volumes": volumes, "volume_mounts": mounts,
        "configmap_name": configmap_name(plan.job_name), "configs": configs,
        "patch_manager": MANAGED_BY["app.kubernetes.io/managed-by"],
    }
    configmap = _env.get_template("configmap.yaml.j2").render(context)
    size = len(configmap.encode())
    if size > CONFIGMAP_LIMIT:
        raise ConfigError(f"ConfigMap {configmap_name(plan.job_name)} would be {size} bytes, over Kubernetes' 1 MiB "
                          f"limit: allow fewer node counts (recipes.elastic_policy.replica_discrete_values) "
                          f"or shrink the inline config")
    job = _env.get_template(TEMPLATES[target]).render(context)
    return Rendered(configs, f"---\n{configmap}---\n{job}")
