"""An evaluation recipe (recipes/evaluation/): the vendor's keys, typed, and the lm-eval tasks they ask for.

Shared by the launcher (dry run, local run) and the evaluation runner in the container
(`python -m training.evaluate`). The vendor's benchmarks map to lm-eval's own tasks with the vendor's
strategies; a value no open library can run is refused in one line naming it and why. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from training.contract.errors import ConfigError
from training.contract.typed import build, one_of, ranged

# The vendor's allowed values (launcher/recipe_templatization/evaluation/evaluation_recipe_template_parameters.json).
VENDOR_TASKS = ("mmlu", "mmlu_pro", "bbh", "gpqa", "math", "strong_reject", "ifeval", "gen_qa", "inference_only")
STRATEGIES = ("zs_cot", "gen_qa", "zs", "fs_cot")
METRICS = ("all", "deflection", "accuracy", "exact_match")
AGGREGATIONS = ("average", "median", "max", "min", "sum")


@dataclass(frozen=True)
class Benchmark:
    """One vendor (task, strategy) as lm-eval runs it: its task (a group for the whole benchmark), the
    name of one subtask, and the few-shot count when the task's own default is not the strategy's."""

    task: str
    subtask: str | None = None  # format string over the vendor's subtask name
    num_fewshot: int | None = None


# The vendor's subtask names where lm-eval's differ (MATH's seven subjects).
_MATH_SUBJECTS = {"counting_and_probability": "counting_and_prob", "number_theory": "num_theory",
                  "precalculus": "precalc"}
BENCHMARKS: dict[str, dict[str, Benchmark]] = {
    "mmlu": {"zs_cot": Benchmark("mmlu_flan_cot_zeroshot", "mmlu_flan_cot_zeroshot_{}"),
             "fs_cot": Benchmark("mmlu_flan_cot_fewshot", "mmlu_flan_cot_fewshot_{}"),
             "zs": Benchmark("mmlu", "mmlu_{}", num_fewshot=0)},
    "mmlu_pro": {"zs_cot": Benchmark("mmlu_pro", num_fewshot=0), "fs_cot": Benchmark("mmlu_pro")},
    "bbh": {"fs_cot": Benchmark("bbh_cot_fewshot", "bbh_cot_fewshot_{}"),
            "zs_cot": Benchmark("bbh_cot_zeroshot", "bbh_cot_zeroshot_{}"),
            "zs": Benchmark("bbh_zeroshot", "bbh_zeroshot_{}")},
    "gpqa": {"zs_cot": Benchmark("gpqa_diamond_cot_zeroshot"), "zs": Benchmark("gpqa_diamond_zeroshot"),
             "fs_cot": Benchmark("gpqa_diamond_cot_n_shot")},
    "math": {"zs_cot": Benchmark("hendrycks_math", "hendrycks_math_{}"),
             "fs_cot": Benchmark("minerva_math", "minerva_math_{}")},
    "ifeval": {"zs": Benchmark("ifeval")},
}
SUBTASKS = {  # which vendor task each vendor subtask belongs to
    "mmlu": ("abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology college_chemistry "
             "college_computer_science college_mathematics college_medicine college_physics computer_security "
             "conceptual_physics econometrics electrical_engineering elementary_mathematics formal_logic global_facts "
             "high_school_biology high_school_chemistry high_school_computer_science high_school_european_history "
             "high_school_geography high_school_government_and_politics high_school_macroeconomics "
             "high_school_mathematics high_school_microeconomics high_school_physics high_school_psychology "
             "high_school_statistics high_school_us_history high_school_world_history human_aging human_sexuality "
             "international_law jurisprudence logical_fallacies machine_learning management marketing medical_genetics "
             "miscellaneous moral_disputes moral_scenarios nutrition philosophy prehistory professional_accounting "
             "professional_law professional_medicine professional_psychology public_relations security_studies "
             "sociology us_foreign_policy virology world_religions").split(),
    "bbh": ("boolean_expressions causal_judgement date_understanding disambiguation_qa dyck_languages formal_fallacies "
            "geometric_shapes hyperbaton logical_deduction_five_objects logical_deduction_seven_objects "
            "logical_deduction_three_objects movie_recommendation multistep_arithmetic_two navigate object_counting "
            "penguins_in_a_table reasoning_about_colored_objects ruin_names salient_translation_error_detection snarks "
            "sports_understanding temporal_sequences tracking_shuffled_objects_five_objects "
            "tracking_shuffled_objects_seven_objects tracking_shuffled_objects_three_objects web_of_lies "
            "word_sorting").split(),
    "math": "algebra counting_and_probability geometry intermediate_algebra number_theory prealgebra precalculus".split(),
}
REFUSED_TASKS = {
    "strong_reject": "StrongREJECT's refusal scoring needs a judge model and has no task in lm-eval or any open "
                     "harness this project builds on; use open_source_llmaj_eval's judge on your own prompts",
    "inference_only": "generations without scores are a serving job, not an evaluation: export the model "
                      "(python -m training.export) and serve it with vLLM",
}


@dataclass
class RunSection:
    name: str = "deterministic-model"
    model_name_or_path: str = ""  # an export directory, a run's checkpoints/step-N, s3://..., a hub id, a LoRA adapter
    base_model_name: str = ""  # evaluated too (once, kept), and the table shows each metric's change against it
    replicas: int = ranged(1, ge=1)  # nodes of the evaluation job; an evaluation resumes at any count
    data_s3_path: str = ""  # gen_qa's rows (JSONL of query, response): s3://... or a local file
    training_config: str = ""  # a checkpoint in S3: its run's job_config.yaml, which exports it


@dataclass
class EvaluationSection:
    task: str = "mmlu"  # a vendor benchmark (VENDOR_TASKS), an lm-eval task name, or a path to a task YAML of your own
    strategy: str = one_of("zs_cot", *STRATEGIES[1:])
    metric: str = one_of("accuracy", "all", "deflection", "exact_match")
    subtask: str = ""  # one of the benchmark's subtasks (mmlu, bbh, math); empty: all of them


@dataclass
class InferenceSection:
    max_new_tokens: int = ranged(2048, ge=1)
    top_k: int = ranged(-1, ge=-1)
    top_p: float = ranged(1.0, gt=0, le=1)
    temperature: float = ranged(0.0, ge=0)
    max_model_len: int = ranged(12000, ge=1)


@dataclass
class OutputSection:
    eval_results_dir: str = ""  # lm-eval's results JSON and per-sample JSONL; default <output_dir>/<run.name>/
    eval_tensorboard_results_dir: str = ""
    kms_key_id: str = ""
    mlflow_tracking_uri: str = ""
    mlflow_experiment_name: str = ""
    mlflow_run_name: str = ""
    mlflow_run_id: str = ""  # the training run's MLflow run: the scores land there, at the checkpoint's step


@dataclass
class ProcessorSection:
    preset_reward_function: str = ""
    lambda_arn: str = ""
    postprocessing: dict = field(default_factory=lambda: {"enabled": False})
    aggregation: str = ""  # how a metric's per-sample values are summarized (default: average)


@dataclass
class EngineSection:
    """How the samples are run: not the vendor's keys, this project's."""

    backend: str = one_of("auto", "hf", "vllm")  # auto: vLLM where a GPU is, else transformers
    batch_size: int = ranged(8, ge=1)  # requests per unit of work: each unit is kept once finished
    limit: int | None = ranged(None, ge=1)  # only the first N samples of each task (smoke runs)
    apply_chat_template: bool | None = None  # default: when the tokenizer has a chat template
    seed: int = 1234
    instance_type: str = "ml.p5.48xlarge"  # the cluster job's nodes (the vendor's default for evaluation)
    tensor_parallel: int | None = ranged(None, ge=1)  # GPUs per engine; default: from the model's memory


@dataclass
class EvalRecipe:
    run: RunSection = field(default_factory=RunSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    inference: InferenceSection = field(default_factory=InferenceSection)
    output: OutputSection = field(default_factory=OutputSection)
    processor: ProcessorSection = field(default_factory=ProcessorSection)
    engine: EngineSection = field(default_factory=EngineSection)


@dataclass
class TrainingEvaluation:
    """`training_config.evaluation`: benchmarks of the model as it trains, each in a process beside rank 0."""

    tasks: list[str] = field(default_factory=list)  # benchmark names (mmlu, ...), lm-eval tasks or task YAML paths
    every_checkpoint: bool = False  # each durable checkpoint; else the last step's alone
    limit: int | None = ranged(None, ge=1)  # the first N samples of each task
    max_new_tokens: int = ranged(256, ge=1)
    batch_size: int = ranged(8, ge=1)
    device: str = one_of("cpu", "cuda")  # cpu: the training's GPUs are never shared


def training_recipes(config: TrainingEvaluation, checkpoint: str, run_config: str = "") -> list[dict]:
    """One evaluation recipe per task of `config`, of `checkpoint` (a benchmark at the vendor's strategy for it)."""
    recipes = []
    for task in config.tasks:
        strategy = next(iter(BENCHMARKS[task])) if task in BENCHMARKS else "zs_cot"
        recipes.append({"run": {"name": "training", "model_name_or_path": checkpoint, "training_config": run_config},
                        "evaluation": {"task": task, "strategy": strategy, "metric": "all"},
                        "inference": {"max_new_tokens": config.max_new_tokens},
                        "engine": {"backend": "hf", "batch_size": config.batch_size, "limit": config.limit}})
    return recipes


def check_training_evaluation(config: TrainingEvaluation) -> None:
    """Each task of `training_config.evaluation` runs, or the one-line error names it."""
    for recipe in training_recipes(config, "checkpoint"):
        try:
            check_recipe(load_recipe(recipe))
        except ConfigError as e:
            raise ConfigError(f"training_config.evaluation.tasks: {e}") from None


@dataclass(frozen=True)
class EvalTask:
    """What lm-eval is asked to run: task names (or one task config of the user's own, its data paths
    made absolute), the few-shot count, and which metric keys the report keeps."""

    names: tuple[str, ...] = ()
    config: dict | None = None  # a task of the user's own or gen_qa's, as lm-eval's task config
    num_fewshot: int | None = None
    metric: str = "accuracy"

    @property
    def label(self) -> str:
        return self.config["task"] if self.config else ",".join(self.names)


def load_recipe(data: dict) -> EvalRecipe:
    return build(EvalRecipe, data)


def check_model_name(key: str, name: str) -> None:
    """A path that names no directory here is refused; a hub id (owner/name) is the hub's to find."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        if "://" not in name and not Path(name).expanduser().exists():
            raise ConfigError(f"{key}={name}: no such directory (an export, a run's checkpoints/step-N, "
                              f"an s3:// prefix or a hub id)")


def is_evaluation(recipe: dict) -> bool:
    """An evaluation recipe, as the vendor's launcher tells them apart: an `evaluation` block and no training config."""
    return isinstance(recipe.get("evaluation"), dict) and "training_config" not in recipe


def check_recipe(recipe: EvalRecipe, data_file_exists=lambda p: Path(p).is_file()) -> EvalTask:
    """The lm-eval task of a recipe, or a one-line ConfigError naming the value that cannot run and why."""
    ev, proc = recipe.evaluation, recipe.processor
    if not recipe.run.model_name_or_path:
        raise ConfigError("recipes.run.model_name_or_path is empty: give an export directory, a run's "
                          "checkpoints/step-N, an s3:// prefix or a hub id")
    if proc.lambda_arn:
        raise ConfigError(f"processor.lambda_arn={proc.lambda_arn}: an AWS Lambda scorer runs only in the vendor's "
                          f"container; score in-process with a task of your own (evaluation.task=<path to a task YAML>)")
    if proc.preset_reward_function:
        raise ConfigError(f"processor.preset_reward_function={proc.preset_reward_function}: the vendor's PRIME "
                          f"scorers are not public; use task=math (math_verify) or a task of your own")
    if proc.postprocessing.get("enabled"):
        raise ConfigError("processor.postprocessing.enabled=true runs the vendor's closed postprocessor: "
                          "a task of your own can filter its answers (lm-eval's filter_list)")
    if proc.aggregation not in ("", *AGGREGATIONS):
        raise ConfigError(f"processor.aggregation={proc.aggregation!r} is not one of {', '.join(AGGREGATIONS)}")
    if ev.metric == "deflection":
        raise ConfigError("evaluation.metric=deflection is strong_reject's refusal rate, which no open harness "
                          "scores: use metric=accuracy, exact_match or all")
    if ev.task in REFUSED_TASKS:
        raise ConfigError(f"evaluation.task={ev.task}: {REFUSED_TASKS[ev.task]}")
    if recipe.inference.temperature > 0 and recipe.inference.top_k == 0:
        raise ConfigError("inference.top_k=0 samples from no token: use -1 (all) or a positive count")
    if ev.task == "gen_qa" or ev.strategy == "gen_qa":
        return _gen_qa(recipe, data_file_exists)
    if ev.task.endswith((".yaml", ".yml")) or "/" in ev.task:
        return EvalTask(config=user_task(ev.task), metric=ev.metric)
    if ev.task not in BENCHMARKS:  # any task lm-eval knows, by its own name (checked where lm-eval is)
        if ev.subtask:
            raise ConfigError(f"evaluation.subtask={ev.subtask}: subtasks are the vendor benchmarks'; name "
                              f"lm-eval's task {ev.task}_<subtask> as evaluation.task instead")
        return EvalTask(names=(ev.task,), metric=ev.metric)
    strategies = BENCHMARKS[ev.task]
    if ev.strategy not in strategies:
        raise ConfigError(f"evaluation.strategy={ev.strategy} is not offered for task={ev.task} (lm-eval has "
                          f"{', '.join(strategies)}): use one of those")
    bench = strategies[ev.strategy]
    if not ev.subtask:
        return EvalTask(names=(bench.task,), num_fewshot=bench.num_fewshot, metric=ev.metric)
    if ev.subtask not in SUBTASKS.get(ev.task, ()):
        owner = next((t for t, names in SUBTASKS.items() if ev.subtask in names), None)
        hint = f"it is {owner}'s" if owner else f"{ev.task} has {'none' if ev.task not in SUBTASKS else 'others'}"
        raise ConfigError(f"evaluation.subtask={ev.subtask} is not a subtask of task={ev.task} ({hint}): "
                          f"leave it empty for the whole benchmark")
    name = _MATH_SUBJECTS.get(ev.subtask, ev.subtask) if ev.task == "math" else ev.subtask
    return EvalTask(names=(bench.subtask.format(name),), num_fewshot=bench.num_fewshot, metric=ev.metric)


def _gen_qa(recipe: EvalRecipe, data_file_exists) -> EvalTask:
    ev, path = recipe.evaluation, recipe.run.data_s3_path
    if ev.task != "gen_qa":  # the strategy of gen_qa's own prompts, as they are written
        raise ConfigError(f"evaluation.strategy=gen_qa with task={ev.task}: gen_qa prompts with your own questions "
                          f"(task=gen_qa); {ev.task} takes {', '.join(BENCHMARKS.get(ev.task, {})) or 'its own prompts'}")
    if not path:
        raise ConfigError("task=gen_qa scores your own questions and needs them: set recipes.run.data_s3_path=<JSONL "
                          "of {query, response}> (s3://... or a local file)")
    if not path.startswith("s3://") and not data_file_exists(path):
        raise ConfigError(f"run.data_s3_path={path}: no such file")
    config = {"task": "gen_qa", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": path}},
              "test_split": "test", "output_type": "generate_until", "doc_to_text": "{{query}}",
              "doc_to_target": "{{response}}", "generation_kwargs": {"until": []},
              "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                               "ignore_case": True, "ignore_punctuation": True},
                              {"metric": "bleu", "aggregation": "bleu", "higher_is_better": True}]}
    return EvalTask(config=config, metric=ev.metric)


class _TaskLoader(yaml.SafeLoader):
    """lm-eval's task YAML: `!function module.name` tags are its own (resolved by lm-eval, kept as text here)."""


_TaskLoader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def user_task(path: str) -> dict:
    """A task of the user's own in lm-eval's YAML format, its local data files made absolute (lm-eval reads
    them from the working directory; the user wrote them beside the YAML)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"evaluation.task={path}: no such task file (a path to a task YAML in lm-eval's format, "
                          f"or a task name: mmlu, bbh, gpqa, math, ifeval, mmlu_pro, gen_qa, or any of lm-eval's)")
    try:
        config = yaml.load(file.read_text(), Loader=_TaskLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"evaluation.task={path}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(config, dict) or not config.get("task"):
        raise ConfigError(f"evaluation.task={path}: a task YAML names its task (task: <name>)")
    if any(str(v).startswith("!function") for v in config.values()):
        raise ConfigError(f"evaluation.task={path}: !function tags need the task's own Python beside it, which the "
                          f"job cannot import from a single file: use Jinja templates (doc_to_text: '{{{{question}}}}')")
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, (str, dict, list)):
        config = {**config, "dataset_kwargs": {**config["dataset_kwargs"], "data_files": _absolute(files, file.parent)}}
    return config


def _absolute(files, base: Path):
    if isinstance(files, dict):
        return {k: _absolute(v, base) for k, v in files.items()}
    if isinstance(files, list):
        return [_absolute(v, base) for v in files]
    if "://" in files or Path(files).is_absolute():
        return files
    resolved = (base / files).resolve()
    if not resolved.exists():
        raise ConfigError(f"data file {files} (beside the task YAML, {resolved}): no such file")
    return str(resolved)
