"""An evaluation as a job, whatever it evaluates: rendered as a HyperPodPyTorchJob or a Kubeflow PyTorchJob of
1 to `replicas` nodes (an evaluation resumes at any size: training.evaluate keeps every finished unit), or run
on this machine under torchrun."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from elastic_launcher import ROOT
from elastic_launcher.config.settings import ClusterSettings, LauncherSettings
from elastic_launcher.planning.instances import InstanceType
from elastic_launcher.render.configs import dump_yaml, write_files
from elastic_launcher.render.manifests import (CONFIGMAP_LIMIT, MANAGED_BY, TEMPLATES, _env, _label_value, _volumes,
                                               cluster_env, configmap_name)
from elastic_launcher.words import plural
from training.contract import buckets
from training.contract.errors import ConfigError

RECIPE_FILE = "recipe.yaml"


@dataclass(frozen=True)
class EvaluationJob:
    name: str
    recipe: dict  # as the pods read it
    files: dict[str, str]  # what the ConfigMap carries beside the recipe
    instance: InstanceType
    processes: int  # per node
    replicas: int


class Carried:
    """Local files that travel in the job's ConfigMap: each path given is read once and named there, and the
    pods read it at <mount>/<its name>. A URI, or a path already there, stays as it is."""

    def __init__(self, mount: str):
        self.mount, self.files, self._names = mount, {}, {}

    def __call__(self, path: str) -> str:
        if not path or "://" in path or path.startswith(self.mount + "/"):
            return path
        if path not in self._names:
            self._names[path] = f"data-{len(self._names)}-{re.sub(r'[^-._a-zA-Z0-9]', '_', Path(path).name)}"
            self.files[self._names[path]] = Path(path).read_text()
        return f"{self.mount}/{self._names[path]}"


def results_dir(eval_results_dir: str, cluster: ClusterSettings, job_name: str) -> tuple[str, list[str]]:
    """Where the pods keep their finished work and write the results (an s3:// eval_results_dir gets a copy at
    the end), and the dry run's warning where no restart would find that work."""
    if eval_results_dir and not buckets.is_s3(eval_results_dir):
        return eval_results_dir, []
    if cluster.checkpoint_pvc:
        return f"{cluster.checkpoint_mount}/evaluation/{job_name}", []
    return f"/tmp/evaluation/{job_name}", ["no cluster.checkpoint_pvc and no output.eval_results_dir on a volume: the "
                                           "finished work stays in the pod, and a restart does it again; give "
                                           "cluster.checkpoint_pvc=<claim>"]


def on_a_pod_volume(path: str, cluster: ClusterSettings) -> bool:
    mounts = [cluster.checkpoint_mount, *(v.get("mount", "") for v in cluster.pvcs.values())]
    return any(m and path.startswith(m.rstrip("/") + "/") for m in mounts)


def _env_list(job: EvaluationJob, cluster: ClusterSettings) -> list[dict]:
    return [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "NNODES", "value": str(job.replicas)},
            {"name": "NPROC_PER_NODE", "value": str(job.processes)}, *cluster_env(cluster)]


def render(job: EvaluationJob, settings: LauncherSettings, recipe_name: str, work: str) -> tuple[Path, str]:
    """<output_dir>/<job name>/: manifest.yaml (the ConfigMap and the job) and the files the ConfigMap carries.
    Returns the directory and the job's kind."""
    cluster, target = settings.cluster, settings.target
    if target not in ("hyperpod", "kubeflow"):
        raise ConfigError(f"target={target}: an evaluation renders as target=hyperpod or target=kubeflow")
    files = {RECIPE_FILE: dump_yaml(job.recipe), **job.files}
    size = sum(len(t.encode()) for t in files.values())
    if size > CONFIGMAP_LIMIT // 2:
        raise ConfigError(f"the evaluation's data ({size} bytes) is too large to travel in the job's ConfigMap: put "
                          f"it in S3 or on a volume the pods mount (cluster.pvcs) and name that path")
    volumes, mounts = _volumes(cluster, job.name, None)
    args = [f"--nnodes=1:{job.replicas}" if target == "kubeflow" else "--nnodes=1", f"--nproc-per-node={job.processes}",
            "-m", "training.evaluate", f"--recipe={cluster.config_mount}/{RECIPE_FILE}", f"--out={work}"]
    context = {
        "job_name": job.name, "namespace": cluster.namespace or "default", "cluster": asdict(cluster),
        "labels": {**MANAGED_BY, "elastic-launcher/recipe": _label_value(recipe_name)},
        "pod_labels": {**MANAGED_BY, "elastic-launcher/job": job.name},
        "policy": {"is_elastic": job.replicas > 1, "min_nodes": 1, "max_nodes": job.replicas,
                   "replica_increment_step": 1, "graceful_shutdown_timeout": 60, "scaling_timeout": 600,
                   "faulty_timeout": 600, "scale_up_snooze_time": 0},
        "allowed_nodes": list(range(1, job.replicas + 1)), "initial_nodes": job.replicas,
        "nproc_per_node": job.processes, "termination_grace_seconds": 90,
        "node_selector": {"node.kubernetes.io/instance-type": job.instance.name, **cluster.node_selector},
        "command": ["hyperpodrun" if target == "hyperpod" else "torchrun"], "args": args,
        "env": _env_list(job, cluster), "ports": [], "resources": job.instance.resources(), "volumes": volumes,
        "volume_mounts": mounts, "configmap_name": configmap_name(job.name), "configs": files,
        "patch_manager": MANAGED_BY["app.kubernetes.io/managed-by"],
    }
    configmap = _env.get_template("configmap.yaml.j2").render(context)
    manifest = _env.get_template(TEMPLATES[target]).render(context)
    manifest = f"---\n{configmap}---\n{manifest}"
    out = write_files(Path(settings.output_dir) / job.name, {"manifest.yaml": manifest, **files})
    return out, "HyperPodPyTorchJob" if target == "hyperpod" else "PyTorchJob"


def describe(job: EvaluationJob, kind: str, what: str, work: str) -> str:
    nodes = f"1 to {job.replicas} nodes" if job.replicas > 1 else "1 node"
    return (f"{kind}: {nodes} of {job.instance.name}, {plural(job.processes, what)} per node; every finished unit "
            f"kept in {work}: a restart at any size resumes it")


def run_local(recipe: dict, settings: LauncherSettings, out: Path) -> int:
    """The evaluation on this machine: `local.nodes` x `local.nproc_per_node` processes under torchrun."""
    out.mkdir(parents=True, exist_ok=True)
    recipe_file = out / RECIPE_FILE
    recipe_file.write_text(dump_yaml(recipe))
    procs = (settings.local.nodes or 1) * settings.local.nproc_per_node
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}",
               "-m", "training.evaluate", f"--recipe={recipe_file}", f"--out={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run(command, env=env, timeout=settings.local.timeout).returncode
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the evaluation ran past local.timeout={settings.local.timeout:.0f} s: raise it") from None
