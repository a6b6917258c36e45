"""`python -m training.evaluate --recipe FILE [--recipe FILE ...] --out DIR [--scores FILE]`: evaluation recipes, one
after the other (a benchmark on lm-eval, or an LLM as judge: training.evaluate.judged), as one process of
RANK/WORLD_SIZE (torchrun's or hyperpodrun's; 0 of 1 alone). Every process runs its share of the samples; rank 0
writes lm-eval's files, prints the table and logs to MLflow and TensorBoard."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from training.contract import buckets
from training.contract.errors import ConfigError, report
from training.contract.evaluation import EvalRecipe, EvalTask, check_recipe, load_recipe
from training.contract.judge_evaluation import is_judge_evaluation, load_judge_recipe
from training.evaluate import scores
from training.evaluate.model_source import ModelSource, resolve
from training.evaluate.work_store import ShardedLM, WorkStore

RESULTS_KEY = "output.eval_results_dir"
GENERATED_SHARE = 0.5  # generations take at most this share of the model's context (the prompt keeps the rest)


@dataclass
class Evaluated:
    source: ModelSource
    results: dict
    files: list[Path]
    requests: int  # lm-eval's requests of the model
    asked: int  # of them, sent to the model by this start's processes (the rest were kept from before)


def gen_kwargs(recipe: EvalRecipe, context: int | None) -> dict:
    inf = recipe.inference
    limit = min(inf.max_new_tokens, inf.max_model_len)
    if context:
        limit = min(limit, int(context * GENERATED_SHARE))
    kwargs = {"max_gen_toks": limit, "do_sample": inf.temperature > 0}
    if inf.temperature > 0:
        kwargs.update(temperature=inf.temperature, top_p=inf.top_p, **({"top_k": inf.top_k} if inf.top_k > 0 else {}))
    return kwargs


def model_context(source: ModelSource) -> int | None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(source.pretrained)
    return getattr(config, "max_position_embeddings", None)


def backend(recipe: EvalRecipe, source: ModelSource, context: int | None):
    """The engine, built when a unit first needs it: vLLM where a GPU is (or asked for), transformers else.
    Each process is one engine on its own `engine.tensor_parallel` GPUs of the node."""
    import torch

    engine, inf = recipe.engine, recipe.inference
    max_length = min(inf.max_model_len, context or inf.max_model_len)
    local, tp = int(os.environ.get("LOCAL_RANK", 0)), engine.tensor_parallel or 1
    if engine.backend == "vllm" or (engine.backend == "auto" and torch.cuda.is_available()):
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(local * tp + i) for i in range(tp))  # vLLM's workers read it
        from lm_eval.models.vllm_causallms import VLLM

        return VLLM(pretrained=source.pretrained, lora_local_path=source.adapter, max_model_len=max_length,
                    tensor_parallel_size=tp, seed=engine.seed, batch_size="auto")
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=source.pretrained, peft=source.adapter, batch_size=engine.batch_size, max_length=max_length,
                device=f"cuda:{local}" if torch.cuda.is_available() else "cpu")


def local_data(task: EvalTask, cache: Path) -> EvalTask:
    """A task whose data files are in S3 (gen_qa's run.data_s3_path, or a task of your own): downloaded once."""
    files = ((task.config or {}).get("dataset_kwargs") or {}).get("data_files")
    if not isinstance(files, dict) or not any(buckets.is_s3(str(v)) for v in files.values()):
        return task
    local = {k: str(buckets.download("run.data_s3_path", v, cache)) if buckets.is_s3(str(v)) else v
             for k, v in files.items()}
    config = {**task.config, "dataset_kwargs": {**task.config["dataset_kwargs"], "data_files": local}}
    return dataclasses.replace(task, config=config)


def evaluate(recipe: EvalRecipe, task: EvalTask, name: str, out: Path, rank: int, world: int, tasks) -> Evaluated:
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.utils import sanitize_model_name
    from transformers import AutoTokenizer

    source = resolve(name, out / "models", rank, run_config=recipe.run.training_config)
    context = model_context(source)
    settings = [source.fingerprint, task.label, task.num_fewshot, gen_kwargs(recipe, context),
                recipe.engine.backend, recipe.engine.seed, recipe.engine.apply_chat_template]
    store = WorkStore(out / "work" / hashlib.sha256(json.dumps(settings, default=str).encode()).hexdigest()[:16])
    store.refresh()
    asked_before = store.asked
    tokenizer = AutoTokenizer.from_pretrained(source.pretrained)
    chat = recipe.engine.apply_chat_template
    chat = bool(tokenizer.chat_template) if chat is None else chat
    lm = ShardedLM(lambda: backend(recipe, source, context), store, rank, world, recipe.engine.batch_size, tokenizer)
    tracker = EvaluationTracker(output_path=str(out)) if rank == 0 else None
    results = lm_eval.simple_evaluate(
        model=lm, tasks=[task.config] if task.config else list(task.names), num_fewshot=task.num_fewshot,
        gen_kwargs=gen_kwargs(recipe, context), limit=recipe.engine.limit, apply_chat_template=chat,
        log_samples=True, task_manager=tasks, evaluation_tracker=tracker, random_seed=0,
        numpy_random_seed=recipe.engine.seed, torch_random_seed=recipe.engine.seed,
        fewshot_random_seed=recipe.engine.seed)
    store.refresh()
    files = []
    if tracker is not None:
        tracker.general_config_tracker.model_name = name
        tracker.general_config_tracker.model_name_sanitized = sanitize_model_name(name)
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
        results["samples"] = samples
        folder = out / sanitize_model_name(name)
        files = [folder / f"results_{tracker.date_id}.json",
                 *sorted(folder.glob(f"samples_*_{tracker.date_id}.jsonl"))]
    return Evaluated(source, results, files, lm.requests, store.asked - asked_before)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__)
    parser.add_argument("--recipe", required=True, action="append",
                        help="an evaluation recipe, resolved (the launcher writes it); repeated: one after the other")
    parser.add_argument("--out", required=True, help="the results directory (output.eval_results_dir)")
    parser.add_argument("--scores", help="also write every recipe's scores here, as one metrics record at the "
                                         "model's step (training_config.evaluation)")
    args = parser.parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    record = {}
    try:
        tasks = None  # lm-eval's index of its tasks: built once, for every model and recipe that needs it
        for path in args.recipe:
            data, out = yaml.safe_load(Path(path).read_text()), Path(args.out)
            if is_judge_evaluation(data):
                from training.evaluate import judged

                record.update(judged.run(load_judge_recipe(data), out, rank, world))
                continue
            recipe = load_recipe(data)
            if tasks is None:
                from lm_eval.tasks import TaskManager

                tasks = TaskManager()
            task = local_data(check_recipe(recipe), out / "data")
            tuned = evaluate(recipe, task, recipe.run.model_name_or_path, out, rank, world, tasks)
            base = evaluate(recipe, task, recipe.run.base_model_name, out / "base", rank, world, tasks) \
                if recipe.run.base_model_name else None
            if rank == 0:
                record.update(step=tuned.source.step or 0, **publish(recipe, tuned, base, out))
    except ConfigError as e:
        return report(e)
    if args.scores and rank == 0:  # whole or absent: the trainer reads it once it exists
        Path(args.scores + ".tmp").write_text(json.dumps(record))
        os.replace(args.scores + ".tmp", args.scores)
    return 0


def publish(recipe: EvalRecipe, tuned: Evaluated, base: Evaluated | None, out: Path) -> dict[str, float]:
    """The table, the flips, TensorBoard, MLflow and an S3 copy where asked; returns the scores by metric name."""
    metric, aggregation = recipe.evaluation.metric, recipe.processor.aggregation
    mine = scores.scores(tuned.results, metric, aggregation)
    theirs = {(s.task, s.metric, s.filter): s for s in scores.scores(base.results, metric, aggregation)} \
        if base else None
    changes = {(s.task, s.metric, s.filter): scores.flips(tuned.results, base.results, s) for s in mine} if base else {}
    files = list(tuned.files)
    if base:
        flips_file = out / "flips.jsonl"
        scores.write_flips(flips_file, tuned.results, base.results, changes)
        files.append(flips_file)
    step = tuned.source.step or 0
    asked = lambda e: f"{e.asked} of {e.requests} requests asked, the rest kept"  # noqa: E731
    print(f"{recipe.run.model_name_or_path}: {asked(tuned)}"
          + (f"; against {recipe.run.base_model_name}: {asked(base)}" if base else ""))
    print(scores.table(mine, theirs, changes))
    if recipe.output.eval_tensorboard_results_dir:
        scores.log_tensorboard(recipe.output.eval_tensorboard_results_dir, mine, step)
    if recipe.output.mlflow_tracking_uri or recipe.output.mlflow_run_id:
        run_id = scores.log_mlflow(recipe.output, mine, theirs, step, files)
        print(f"mlflow: run {run_id}, step {step}")
    print(f"wrote {', '.join(str(f) for f in files)}")
    if buckets.is_s3(uri := recipe.output.eval_results_dir):
        s3 = buckets.client(RESULTS_KEY)
        for file in files:
            buckets.put(s3, RESULTS_KEY, f"{uri.rstrip('/')}/{file.relative_to(out).as_posix()}", file.read_bytes())
        print(f"copied to {uri}")
    return {scores.metric_name(s): s.value for s in mine}


if __name__ == "__main__":
    sys.exit(main())
