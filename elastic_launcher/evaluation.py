"""An evaluation recipe (recipes/evaluation/) -> a job: the dry run renders it as a HyperPodPyTorchJob (or a
Kubeflow PyTorchJob) sized from `run.replicas` and the model's memory; `action=local` runs it here.

The job is elastic like a training job: the evaluation is sharded by sample and keeps every finished one
(training.evaluate.work_store), so any node count in 1..replicas finishes it with the same scores.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from elastic_launcher import ROOT
from elastic_launcher.config.compose import to_plain
from elastic_launcher.config.settings import LauncherSettings
from elastic_launcher.local.run import found
from elastic_launcher.planning.instances import InstanceType, lookup
from elastic_launcher.planning.model_config import read_config
from elastic_launcher.render.configs import dump_yaml, write_files
from elastic_launcher.render.manifests import CONFIGMAP_LIMIT, MANAGED_BY, TEMPLATES, _env, _label_value, _volumes, configmap_name
from elastic_launcher.words import plural
from training.contract import buckets
from training.contract.checkpoint_dirs import COMPLETE
from training.contract.errors import ConfigError
from training.contract.evaluation import EvalRecipe, EvalTask, check_recipe, load_recipe
from training.contract.typed import build

ACTIONS = ("dry_run", "local")
INSTANCE = "ml.p5.48xlarge"  # the vendor's default for its evaluation jobs
WEIGHT_BYTES = 2  # bf16 weights, as the engine serves them
KV_SHARE = 0.5  # of a GPU's memory that the weights may take: vLLM's KV cache and activations need the rest
RECIPE_FILE, TASK_FILE = "recipe.yaml", "task.yaml"


def parameters(config: dict) -> float:
    """A decoder's parameter count from its config (embeddings, attention, MLP or experts, norms; no biases)."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config.get("vocab_size", 32000)
    heads = config.get("num_attention_heads", 1)
    kv = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or h // heads
    attention = h * head_dim * (2 * heads + 2 * kv)
    ffn = config.get("moe_intermediate_size") or config.get("intermediate_size", 4 * h)
    experts = config.get("num_local_experts") or config.get("n_routed_experts") or config.get("num_experts") or 1
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return layers * (attention + 3 * h * ffn * experts + 2 * h) + h + embeddings  # + each layer's two norms, the last


def tensor_parallel(model: str, instance: InstanceType) -> tuple[int, str]:
    """GPUs per engine: the fewest (a power of two) whose memory holds the weights with room for the cache."""
    if not instance.gpus:
        return 1, "no GPU: one engine per process on CPU"
    try:
        config = read_config(model)
    except ConfigError:
        return 1, f"{model}'s config is not readable here: 1 GPU per engine (set recipes.engine.tensor_parallel)"
    weights = parameters(config) * WEIGHT_BYTES / 2**30
    tp = 1
    while weights > KV_SHARE * instance.gpu_memory_gib * tp and tp < instance.gpus:
        tp *= 2
    if weights > KV_SHARE * instance.gpu_memory_gib * tp:
        raise ConfigError(f"run.model_name_or_path={model}: {weights:.0f} GiB of weights do not fit one "
                          f"{instance.name}'s {instance.gpus} GPUs with room for the cache: use a larger instance "
                          f"(recipes.engine.instance_type)")
    return tp, f"{weights:.1f} GiB of weights: {plural(tp, 'GPU')} per engine"


def run(cfg, recipe_name: str) -> int:
    data = to_plain(cfg)
    settings = build(LauncherSettings, {k: v for k, v in data.items() if k != "recipes"})
    recipe = localized(load_recipe(data["recipes"]))
    if settings.action not in ACTIONS:
        raise ConfigError(f"action={settings.action}: an evaluation recipe takes {' or '.join(ACTIONS)} "
                          f"(the dry run writes the manifest for kubectl apply -f)")
    task = check_recipe(recipe)
    if settings.action == "local":
        return run_local(recipe, settings, local_results(recipe, settings))
    return dry_run(recipe, task, settings, recipe_name, Path(settings.output_dir) / (settings.cluster.job_name or recipe.run.name))


def localized(recipe: EvalRecipe) -> EvalRecipe:
    """The recipe's local paths (model, base, task file, data) found from here, else from the project."""
    run, ev = recipe.run, recipe.evaluation
    return dataclasses.replace(
        recipe, run=dataclasses.replace(run, model_name_or_path=found(run.model_name_or_path),
                                        base_model_name=found(run.base_model_name) if run.base_model_name else "",
                                        data_s3_path=found(run.data_s3_path) if run.data_s3_path else ""),
        evaluation=dataclasses.replace(ev, task=found(ev.task)))


def local_results(recipe: EvalRecipe, settings: LauncherSettings) -> Path:
    """Where a local evaluation writes: output.eval_results_dir, else local.run_dir, else beside the training
    run whose checkpoint it evaluates (<run>/evaluation), else runs/<run.name>."""
    if recipe.output.eval_results_dir or settings.local.run_dir:
        return Path(recipe.output.eval_results_dir or settings.local.run_dir)
    model = Path(recipe.run.model_name_or_path)
    if (model / COMPLETE).exists():
        return model.parent.parent / "evaluation"
    return Path("runs") / recipe.run.name


def shipped(recipe: EvalRecipe, task: EvalTask, mount: str) -> tuple[dict, dict[str, str]]:
    """The recipe as the pods read it, and the files its ConfigMap carries: a task of the user's own and the
    local data files it or gen_qa names travel with the job, at `mount`."""
    data, files, names = asdict(recipe), {}, {}

    def carried(path: str) -> str:
        if "://" in path or path.startswith(mount + "/"):
            return path
        if path not in names:
            names[path] = f"data-{len(names)}-{re.sub(r'[^-._a-zA-Z0-9]', '_', Path(path).name)}"
            files[names[path]] = Path(path).read_text()
        return f"{mount}/{names[path]}"

    if recipe.evaluation.task == "gen_qa":
        data["run"]["data_s3_path"] = carried(recipe.run.data_s3_path)
    elif task.config is not None:
        kwargs = task.config.get("dataset_kwargs") or {}
        paths = kwargs.get("data_files")
        if paths is not None:
            paths = {k: carried(v) for k, v in paths.items()} if isinstance(paths, dict) else \
                [carried(v) for v in paths] if isinstance(paths, list) else carried(paths)
            kwargs = {**kwargs, "data_files": paths}
        files[TASK_FILE] = dump_yaml({**task.config, "dataset_kwargs": kwargs} if kwargs else task.config)
        data["evaluation"]["task"] = f"{mount}/{TASK_FILE}"
    size = sum(len(t.encode()) for t in files.values())
    if size > CONFIGMAP_LIMIT // 2:
        raise ConfigError(f"evaluation.task={recipe.evaluation.task}: its data ({size} bytes) is too large to travel "
                          f"in the job's ConfigMap: put it in S3 or on a volume the pods mount (cluster.pvcs) and "
                          f"name that path in the task")
    return data, files


def dry_run(recipe: EvalRecipe, task: EvalTask, settings: LauncherSettings, recipe_name: str, out: Path) -> int:
    cluster, target = settings.cluster, settings.target
    if target not in ("hyperpod", "kubeflow"):
        raise ConfigError(f"target={target}: an evaluation renders as target=hyperpod or target=kubeflow")
    instance = lookup(recipe.engine.instance_type, "recipes.engine.instance_type")
    tp, why = (recipe.engine.tensor_parallel, "as set") if recipe.engine.tensor_parallel else \
        tensor_parallel(recipe.run.model_name_or_path, instance)
    recipe = dataclasses.replace(recipe, engine=dataclasses.replace(recipe.engine, tensor_parallel=tp))
    engines = max(1, instance.gpus // tp)
    job_name = cluster.job_name or recipe.run.name
    data, carried = shipped(recipe, task, cluster.config_mount)
    files = {RECIPE_FILE: dump_yaml(data), **carried}
    volumes, mounts = _volumes(cluster, job_name, None)
    work, warnings = pod_results(recipe, cluster, job_name)
    args = [f"--nnodes=1:{recipe.run.replicas}" if target == "kubeflow" else "--nnodes=1",
            f"--nproc-per-node={engines}", "-m", "training.evaluate",
            f"--recipe={cluster.config_mount}/{RECIPE_FILE}", f"--out={work}"]
    labels = {**MANAGED_BY, "elastic-launcher/recipe": _label_value(recipe_name)}
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "NNODES", "value": str(recipe.run.replicas)},
           {"name": "NPROC_PER_NODE", "value": str(engines)}]
    context = {
        "job_name": job_name, "namespace": cluster.namespace or "default", "labels": labels, "cluster": asdict(cluster),
        "pod_labels": {**MANAGED_BY, "elastic-launcher/job": job_name},
        "policy": {"is_elastic": recipe.run.replicas > 1, "min_nodes": 1, "max_nodes": recipe.run.replicas,
                   "replica_increment_step": 1, "graceful_shutdown_timeout": 60, "scaling_timeout": 600,
                   "faulty_timeout": 600, "scale_up_snooze_time": 0},
        "allowed_nodes": list(range(1, recipe.run.replicas + 1)), "initial_nodes": recipe.run.replicas,
        "nproc_per_node": engines, "termination_grace_seconds": 90,
        "node_selector": {"node.kubernetes.io/instance-type": instance.name, **cluster.node_selector},
        "command": ["hyperpodrun" if target == "hyperpod" else "torchrun"], "args": args, "env": env, "ports": [],
        "resources": instance.resources(), "volumes": volumes, "volume_mounts": mounts,
        "configmap_name": configmap_name(job_name), "configs": files,
        "patch_manager": MANAGED_BY["app.kubernetes.io/managed-by"],
    }
    configmap = _env.get_template("configmap.yaml.j2").render(context)
    job = _env.get_template(TEMPLATES[target]).render(context)
    written = write_files(out, {"manifest.yaml": f"---\n{configmap}---\n{job}", **files})
    kind = "HyperPodPyTorchJob" if target == "hyperpod" else "PyTorchJob"
    print(f"{job_name}: evaluation of {recipe.run.model_name_or_path} on {task.label}"
          + (f" (num_fewshot {task.num_fewshot})" if task.num_fewshot is not None else "")
          + (f", against {recipe.run.base_model_name}" if recipe.run.base_model_name else ""))
    nodes = f"1 to {recipe.run.replicas} nodes" if recipe.run.replicas > 1 else "1 node"
    print(f"{kind}: {nodes} of {instance.name}, {plural(engines, 'engine')} per node ({why}); sharded by sample, "
          f"every finished one kept in {work}: a restart at any size resumes it")
    for line in warnings:
        print(f"warning: {line}")
    print(f"wrote {written / 'manifest.yaml'}, {written / RECIPE_FILE}")
    return 0


def pod_results(recipe: EvalRecipe, cluster, job_name: str) -> tuple[str, list[str]]:
    """Where the pods keep the finished samples and write lm-eval's files (an s3:// eval_results_dir gets a copy
    at the end), and what the dry run warns of: a store no restart finds, a model path the pods do not have."""
    results, warnings = recipe.output.eval_results_dir, []
    if results and not buckets.is_s3(results):
        work = results
    elif cluster.checkpoint_pvc:
        work = f"{cluster.checkpoint_mount}/evaluation/{job_name}"
    else:
        work = f"/tmp/evaluation/{job_name}"
        warnings.append("no cluster.checkpoint_pvc and no output.eval_results_dir on a volume: the finished samples "
                        "stay in the pod, and a restart asks them again; give cluster.checkpoint_pvc=<claim>")
    model, mounts = recipe.run.model_name_or_path, [cluster.checkpoint_mount, *(v.get("mount", "") for v in cluster.pvcs.values())]
    if Path(model).exists() and not any(m and model.startswith(m.rstrip("/") + "/") for m in mounts):
        warnings.append(f"run.model_name_or_path={model} is a path on this machine: the pods read a model from S3, "
                        f"the hub or a volume they mount (an absolute path under cluster.checkpoint_mount or cluster.pvcs)")
    return work, warnings


def run_local(recipe: EvalRecipe, settings: LauncherSettings, out: Path) -> int:
    """The evaluation on this machine: `local.nodes` x `local.nproc_per_node` processes under torchrun."""
    out.mkdir(parents=True, exist_ok=True)
    recipe_file = out / RECIPE_FILE
    recipe_file.write_text(dump_yaml(asdict(recipe)))
    procs = (settings.local.nodes or 1) * settings.local.nproc_per_node
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}",
               "-m", "training.evaluate", f"--recipe={recipe_file}", f"--out={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run(command, env=env, timeout=settings.local.timeout).returncode
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the evaluation ran past local.timeout={settings.local.timeout:.0f} s: raise it") from None
