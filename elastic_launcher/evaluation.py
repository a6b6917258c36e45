"""An evaluation recipe (recipes/evaluation/) checked and made a job (elastic_launcher.evaluation_job): the
deterministic benchmarks, sized from `run.replicas` and the model's memory, and the LLM-as-judge recipe, on
CPU nodes. The dry run renders the job; `action=local` runs it here."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

from elastic_launcher.config.compose import to_plain
from elastic_launcher.config.settings import LauncherSettings
from elastic_launcher.evaluation_job import (RECIPE_FILE, Carried, EvaluationJob, describe, on_a_pod_volume,
                                             render, results_dir, run_local)
from elastic_launcher.local.run import found
from elastic_launcher.planning.instances import InstanceType, lookup
from elastic_launcher.planning.model_config import read_config
from elastic_launcher.render.manifests import require_secret
from elastic_launcher.render.configs import dump_yaml
from elastic_launcher.words import plural
from training.contract import buckets
from training.contract.checkpoint_dirs import COMPLETE
from training.contract.errors import ConfigError
from training.contract.evaluation import EvalRecipe, EvalTask, check_model_name, check_recipe, load_recipe
from training.contract.judge_evaluation import (JudgeEvalRecipe, check_generations, is_judge_evaluation,
                                                judged_metrics, load_judge_recipe, read_generations)
from training.contract.typed import build

ACTIONS = ("dry_run", "local")
GENERATIONS = ("inference_data_s3_path", "base_model_inference_data_s3_path")  # the judge recipe's data keys
JUDGE_INSTANCE = "ml.m5.2xlarge"  # the judge's calls need no GPU (the vendor's judge runs on a CPU instance)
WEIGHT_BYTES = 2  # bf16 weights, as the engine serves them
KV_SHARE = 0.5  # of a GPU's memory that the weights may take: vLLM's KV cache and activations need the rest
TASK_FILE = "task.yaml"


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
    if settings.action not in ACTIONS:
        raise ConfigError(f"action={settings.action}: an evaluation recipe takes {' or '.join(ACTIONS)} "
                          f"(the dry run writes the manifest for kubectl apply -f)")
    if is_judge_evaluation(data["recipes"]):
        return judged(load_judge_recipe(data["recipes"]), settings, recipe_name)
    recipe = localized(load_recipe(data["recipes"]))
    task = check_recipe(recipe)
    if settings.action == "local":  # the models are this machine's (a dry run's may be on the pods' volumes)
        for key in ("model_name_or_path", "base_model_name"):
            check_model_name(f"run.{key}", getattr(recipe.run, key))
        return run_local(asdict(recipe), settings, local_results(recipe.output.eval_results_dir, settings,
                                                                 recipe.run.model_name_or_path, recipe.run.name))
    return dry_run(recipe, task, settings, recipe_name)


def judged(recipe: JudgeEvalRecipe, settings: LauncherSettings, recipe_name: str) -> int:
    """The LLM-as-judge recipe: its judge and metrics checked, the generations on this machine read and checked."""
    paths = {key: found(path) for key in GENERATIONS if (path := getattr(recipe.run, key))}
    recipe = dataclasses.replace(recipe, run=dataclasses.replace(recipe.run, **paths))
    metrics, run = judged_metrics(recipe), recipe.run
    rows = {key: read_generations(Path(path), f"run.{key}") for key, path in paths.items() if not buckets.is_s3(path)}
    if GENERATIONS[0] in rows:
        check_generations(metrics, rows[GENERATIONS[0]], rows.get(GENERATIONS[1]), f"run.{GENERATIONS[0]}")
    if settings.action == "local":
        out = local_results(recipe.output.eval_results_dir, settings, "", run.name)
        return run_local(asdict(recipe), settings, out)
    cluster, data = settings.cluster, asdict(recipe)
    carried = Carried(cluster.config_mount)
    data["run"].update({key: carried(path) for key, path in paths.items()})  # local generations travel with the job
    if metrics[0].settings.api_key_env:
        require_secret("recipes.judge.api_key_env", metrics[0].settings.api_key_env, cluster)
    job = EvaluationJob(cluster.job_name or run.name, data, carried.files, lookup(JUDGE_INSTANCE), 1, run.replicas)
    work, warnings = results_dir(recipe.output.eval_results_dir, cluster, job.name)
    out, kind = render(job, settings, recipe_name, work)
    print(f"{job.name}: {', '.join(m.name for m in metrics)} of {run.inference_data_s3_path} judged by "
          f"{metrics[0].settings.label}")
    print(describe(job, kind, "judging process", work) + "; every verdict kept in its ledger, never asked twice")
    for line in warnings:
        print(f"warning: {line}")
    print(f"wrote {out / 'manifest.yaml'}, {out / RECIPE_FILE}")
    return 0


def localized(recipe: EvalRecipe) -> EvalRecipe:
    """The recipe's local paths (model, base, task file, data) found from here, else from the project."""
    run, ev = recipe.run, recipe.evaluation
    return dataclasses.replace(
        recipe, run=dataclasses.replace(run, model_name_or_path=found(run.model_name_or_path),
                                        base_model_name=found(run.base_model_name) if run.base_model_name else "",
                                        data_s3_path=found(run.data_s3_path) if run.data_s3_path else ""),
        evaluation=dataclasses.replace(ev, task=found(ev.task)))


def local_results(eval_results_dir: str, settings: LauncherSettings, model: str, name: str) -> Path:
    """Where a local evaluation writes: output.eval_results_dir, else local.run_dir, else beside the training
    run whose checkpoint it evaluates (<run>/evaluation), else runs/<run.name>."""
    if eval_results_dir or settings.local.run_dir:
        return Path(eval_results_dir or settings.local.run_dir)
    if model and (Path(model) / COMPLETE).exists():
        return Path(model).parent.parent / "evaluation"
    return Path("runs") / name


def shipped(recipe: EvalRecipe, task: EvalTask, mount: str) -> tuple[dict, dict[str, str]]:
    """The recipe as the pods read it, and the files its ConfigMap carries: a task of the user's own and the
    local data files it or gen_qa names travel with the job, at `mount`."""
    data, carried = asdict(recipe), Carried(mount)
    if recipe.evaluation.task == "gen_qa":
        data["run"]["data_s3_path"] = carried(recipe.run.data_s3_path)
    elif task.config is not None:
        kwargs = dict(task.config.get("dataset_kwargs") or {})
        paths = kwargs.get("data_files")
        if paths is not None:
            kwargs["data_files"] = {k: carried(v) for k, v in paths.items()} if isinstance(paths, dict) else \
                [carried(v) for v in paths] if isinstance(paths, list) else carried(paths)
        carried.files[TASK_FILE] = dump_yaml({**task.config, "dataset_kwargs": kwargs} if kwargs else task.config)
        data["evaluation"]["task"] = f"{mount}/{TASK_FILE}"
    return data, carried.files


def dry_run(recipe: EvalRecipe, task: EvalTask, settings: LauncherSettings, recipe_name: str) -> int:
    cluster = settings.cluster
    instance = lookup(recipe.engine.instance_type, "recipes.engine.instance_type")
    tp, why = (recipe.engine.tensor_parallel, "as set") if recipe.engine.tensor_parallel else \
        tensor_parallel(recipe.run.model_name_or_path, instance)
    recipe = dataclasses.replace(recipe, engine=dataclasses.replace(recipe.engine, tensor_parallel=tp))
    data, files = shipped(recipe, task, cluster.config_mount)
    job = EvaluationJob(cluster.job_name or recipe.run.name, data, files, instance, max(1, instance.gpus // tp),
                        recipe.run.replicas)
    work, warnings = results_dir(recipe.output.eval_results_dir, cluster, job.name)
    model = recipe.run.model_name_or_path
    if Path(model).exists() and not on_a_pod_volume(model, cluster):
        warnings.append(f"run.model_name_or_path={model} is a path on this machine: the pods read a model from S3, "
                        f"the hub or a volume they mount (a path under cluster.checkpoint_mount or cluster.pvcs)")
    out, kind = render(job, settings, recipe_name, work)
    print(f"{job.name}: evaluation of {model} on {task.label}"
          + (f" (num_fewshot {task.num_fewshot})" if task.num_fewshot is not None else "")
          + (f", against {recipe.run.base_model_name}" if recipe.run.base_model_name else ""))
    print(describe(job, kind, "engine", work) + f" ({why})")
    for line in warnings:
        print(f"warning: {line}")
    print(f"wrote {out / 'manifest.yaml'}, {out / RECIPE_FILE}")
    return 0
