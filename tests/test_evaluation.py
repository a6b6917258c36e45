"""Evaluating a trained model (recipes/evaluation/, training/evaluate/): the vendor's values run or are refused in
one line, the dry run renders an elastic job, a local run prints the table against the base and writes lm-eval's
files, a kill half-way resumes at another size with the same scores, a checkpoint step lands in its training
run's MLflow run at its step."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_launcher_process
from k8s_schema import hyperpod_sdk_model, validate_crd
from training.contract.errors import ConfigError
from training.contract.evaluation import BENCHMARKS, REFUSED_TASKS, SUBTASKS, EvalRecipe, check_recipe, load_recipe

VENDOR = json.loads((ROOT / "tests" / "fixtures" / "vendor_evaluation_parameters.json").read_text())["enums"]
RECIPE = "recipes=evaluation/open_source_deterministic_eval"
TINY = "data/tiny_grpo_model"
CHOICE, ANSWER = "data/eval/arith_choice.yaml", "data/eval/arith_answer.yaml"


def recipe(**sections) -> EvalRecipe:
    data = {"run": {"model_name_or_path": TINY}}
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return load_recipe(data)


@pytest.fixture(scope="module")
def lm_eval_tasks() -> set[str]:
    from lm_eval.tasks import TaskManager

    return set(TaskManager().all_tasks)


def test_every_vendor_task_and_strategy_runs_on_lm_eval_or_is_refused_in_one_line(lm_eval_tasks):
    runnable = set()
    for task in VENDOR["task"]:
        for strategy in VENDOR["strategy"]:
            try:
                found = check_recipe(recipe(evaluation={"task": task, "strategy": strategy},
                                            run={"data_s3_path": "s3://bucket/qa.jsonl"}))
            except ConfigError as e:
                message = str(e)
                assert "\n" not in message and (task in message or strategy in message), message
                continue
            runnable.add(task)
            assert found.config or set(found.names) <= lm_eval_tasks, (task, strategy, found)
    assert runnable == set(VENDOR["task"]) - set(REFUSED_TASKS)  # each benchmark lm-eval has runs at some strategy
    for task in set(BENCHMARKS) - {"gen_qa"}:  # the vendor's pairing (its docs), at least
        assert BENCHMARKS[task], task


def test_every_vendor_subtask_names_an_lm_eval_task_of_its_benchmark(lm_eval_tasks):
    owners = {name: task for task, names in SUBTASKS.items() for name in names}
    assert set(owners) == set(VENDOR["subtask"])
    for subtask, task in owners.items():
        for strategy in BENCHMARKS[task]:
            found = check_recipe(recipe(evaluation={"task": task, "strategy": strategy, "subtask": subtask}))
            assert set(found.names) <= lm_eval_tasks, (task, strategy, subtask, found.names)
    with pytest.raises(ConfigError, match="subtask=algebra is not a subtask of task=mmlu .it is math's"):
        check_recipe(recipe(evaluation={"task": "mmlu", "subtask": "algebra"}))


@pytest.mark.parametrize("section, key, value, named", [
    ("evaluation", "metric", "deflection", "deflection"),
    ("processor", "lambda_arn", "arn:aws:lambda:us-west-2:1:function:score", "lambda_arn"),
    ("processor", "preset_reward_function", "prime_math", "prime_math"),
    ("processor", "preset_reward_function", "prime_code", "prime_code"),
    ("evaluation", "task", "gen_qa", "data_s3_path"),
    ("evaluation", "task", "inference_only", "inference_only"),
    ("evaluation", "task", "strong_reject", "strong_reject"),
    ("evaluation", "strategy", "fs_cot", "strategy=fs_cot"),  # ifeval is zero-shot only
])
def test_a_value_that_cannot_run_is_refused_by_the_dry_run_in_one_line(launch, tmp_path, section, key, value, named):
    task = ["recipes.evaluation.task=ifeval"] if key == "strategy" else []
    code, out, err = launch(RECIPE, f"recipes.run.model_name_or_path={TINY}", *task, f"recipes.{section}.{key}={value}")
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_every_aggregation_and_metric_the_vendor_allows_is_taken():
    for aggregation in VENDOR["aggregation"]:
        check_recipe(recipe(processor={"aggregation": aggregation}))
    for metric in set(VENDOR["evaluation_metric"]) - {"deflection"}:
        check_recipe(recipe(evaluation={"metric": metric}))


def test_a_task_of_your_own_reads_its_data_beside_it_and_refuses_what_a_job_cannot_carry(tmp_path):
    found = check_recipe(recipe(evaluation={"task": str(ROOT / CHOICE)}))
    assert found.config["task"] == "arith_choice"
    assert found.config["dataset_kwargs"]["data_files"]["test"] == str(ROOT / "data" / "eval" / "arith.jsonl")
    custom = tmp_path / "mine.yaml"
    custom.write_text("task: mine\ndataset_path: json\nprocess_docs: !function utils.process\n")
    with pytest.raises(ConfigError, match="!function"):
        check_recipe(recipe(evaluation={"task": str(custom)}))
    custom.write_text("task: mine\ndataset_path: json\ndataset_kwargs: {data_files: {test: gone.jsonl}}\n")
    with pytest.raises(ConfigError, match="gone.jsonl"):
        check_recipe(recipe(evaluation={"task": str(custom)}))


def test_the_parameter_count_that_sizes_the_engines_is_the_models_own():
    from safetensors import safe_open

    from elastic_launcher.evaluation import parameters
    from elastic_launcher.planning.model_config import read_config

    with safe_open(str(ROOT / TINY / "model.safetensors"), "pt") as f:
        counted = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    assert parameters(read_config(str(ROOT / TINY))) == counted


@pytest.mark.parametrize("target, kind", [("hyperpod", "HyperPodPyTorchJob"), ("kubeflow", "PyTorchJob")])
def test_the_dry_run_renders_an_elastic_evaluation_job_that_carries_its_task(launch, tmp_path, target, kind):
    code, out, err = launch(RECIPE, f"recipes.run.model_name_or_path={ROOT / TINY}", f"recipes.evaluation.task={CHOICE}",
                            "recipes.run.replicas=4", f"target={target}", "cluster.checkpoint_pvc=fsx-claim")
    assert code == 0, err
    assert f"{kind}: 1 to 4 nodes of ml.p5.48xlarge, 8 engines per node" in out, out
    docs = [d for d in yaml.safe_load_all((tmp_path / "out" / "deterministic-model" / "manifest.yaml").read_text()) if d]
    configmap, job = docs
    assert job["kind"] == kind
    files = configmap["data"]
    shipped = load_recipe(yaml.safe_load(files["recipe.yaml"]))
    assert shipped.evaluation.task == "/config/task.yaml" and shipped.engine.tensor_parallel == 1
    task = yaml.safe_load(files["task.yaml"])
    data = task["dataset_kwargs"]["data_files"]["test"]
    assert data.startswith("/config/") and files[data.removeprefix("/config/")] == (ROOT / "data/eval/arith.jsonl").read_text()
    if target == "hyperpod":
        assert job["spec"]["elasticPolicy"]["minReplicas"] == 1 and job["spec"]["elasticPolicy"]["maxReplicas"] == 4
        validate_crd(job, "hyperpodpytorchjob.schema.yaml")
        hyperpod_sdk_model().model_validate(job["spec"], by_name=True, by_alias=False)
        pod = job["spec"]["replicaSpecs"][0]["template"]["spec"]
    else:
        assert job["spec"]["elasticPolicy"]["minReplicas"] == 1 and job["spec"]["elasticPolicy"]["maxReplicas"] == 4
        pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("-m") + 1] == "training.evaluate" and "--out=/checkpoints/evaluation/deterministic-model" in args


def test_a_dry_run_of_an_evaluation_never_imports_torch_or_lm_eval(tmp_path):
    probe = ("import sys; from elastic_launcher.cli import main; code = main(sys.argv[1:]); assert code == 0; "
             "bad = {'torch', 'lm_eval', 'kubernetes'} & set(sys.modules); assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", probe, RECIPE, "recipes.run.model_name_or_path=meta-llama/Llama-3.1-8B",
                             f"output_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "mmlu_flan_cot_zeroshot" in result.stdout


def test_a_unit_cut_short_by_a_kill_is_never_read(tmp_path):
    from training.evaluate.work_store import WorkStore

    store = WorkStore(tmp_path)
    store.asking("a", 2)
    store.put("a", [1, 2])
    with open(tmp_path / "killed.jsonl", "w") as f:
        f.write(json.dumps({"asked": "b", "n": 3}) + "\n" + '{"key": "b", "out": [1')  # killed mid-line
    again = WorkStore(tmp_path)
    again.refresh()
    assert again.done == {"a": [1, 2]} and again.asked == 5


# --- whole evaluations (lm-eval on the tiny models) ---


def samples(out: Path, model: str, task: str) -> dict[int, dict]:
    """lm-eval's per-sample records of `model` (as run.model_name_or_path names it) by document."""
    from lm_eval.utils import sanitize_model_name

    file = next((out / sanitize_model_name(model)).glob(f"samples_{task}_*.jsonl"))
    return {int(s["doc_id"]): s for s in map(json.loads, file.read_text().splitlines())}


def random_model(path: Path, seed: int) -> Path:
    """The tiny model's shape and tokenizer with weights drawn from `seed`: a base that scores differently."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ROOT / TINY)).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(ROOT / TINY / name, path / name)
    return path


def asked_lines(work: Path) -> int:
    return sum(1 for f in work.rglob("*.jsonl") for line in f.read_text().splitlines() if '"asked"' in line)


@pytest.mark.slow
def test_a_local_evaluation_prints_the_table_against_its_base_which_is_evaluated_once(tmp_path):
    base = random_model(tmp_path / "base", seed=3)
    out = tmp_path / "results"
    args = [RECIPE, f"recipes.run.model_name_or_path={TINY}", f"recipes.run.base_model_name={base}",
            f"recipes.evaluation.task={CHOICE}", f"recipes.output.eval_results_dir={out}", "action=local",
            "local.nproc_per_node=2"]
    first = run_launcher_process(*args, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    header = next(line for line in first.stdout.splitlines() if line.startswith("task "))
    assert header.split() == ["task", "metric", "filter", "n", "score", "base", "change", "gained", "lost"]
    row = next(line for line in first.stdout.splitlines() if line.startswith("arith_choice")).split()
    tuned, old = samples(out, str(ROOT / TINY), "arith_choice"), samples(out / "base", str(base), "arith_choice")
    assert len(tuned) == len(old) == 60
    gained = sorted(d for d in tuned if tuned[d]["acc"] > old[d]["acc"])
    lost = sorted(d for d in tuned if tuned[d]["acc"] < old[d]["acc"])
    score, base_score = (sum(s["acc"] for s in x.values()) / 60 for x in (tuned, old))
    assert row[3:] == ["60", f"{score:.4f}", f"{base_score:.4f}", f"{score - base_score:+.4f}", str(len(gained)),
                       str(len(lost))]
    flips = [json.loads(line) for line in (out / "flips.jsonl").read_text().splitlines()]
    assert sorted(f["doc_id"] for f in flips if f["flip"] == "gained") == gained
    assert sorted(f["doc_id"] for f in flips if f["flip"] == "lost") == lost
    results = json.loads(next(out.glob("*tiny_grpo_model/results_*.json")).read_text())
    assert results["results"]["arith_choice"]["acc,none"] == pytest.approx(score)
    base_asked = asked_lines(out / "base" / "work")
    second = run_launcher_process(*args, timeout=300)  # the base's samples are kept: not asked again
    assert second.returncode == 0, second.stderr[-3000:]
    assert asked_lines(out / "base" / "work") == base_asked
    assert next(line for line in second.stdout.splitlines() if line.startswith("arith_choice")).split() == row


@pytest.mark.slow
def test_killed_half_way_it_resumes_at_another_size_with_the_same_scores_asking_little_more(tmp_path):
    common = [RECIPE, f"recipes.run.model_name_or_path={TINY}", f"recipes.evaluation.task={ANSWER}",
              "recipes.inference.max_new_tokens=6", "recipes.engine.batch_size=2", "action=local"]
    reference = run_launcher_process(*common, f"recipes.output.eval_results_dir={tmp_path / 'ref'}", timeout=300)
    assert reference.returncode == 0, reference.stderr[-3000:]
    out = tmp_path / "resized"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests' / 'fixtures' / 'eval_kill'}{os.pathsep}{ROOT}",
           "ELASTIC_TEST_EVAL_KILL_AFTER": "8"}  # 30 units: rank 0 of 2 dies after its 8th, half-way
    killed = subprocess.run([sys.executable, "launcher.py", *common, f"recipes.output.eval_results_dir={out}",
                             "local.nproc_per_node=2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode != 0 and "Signal 9 (SIGKILL)" in killed.stderr, killed.stderr[-3000:]
    assert not list(out.glob("*/results_*.json"))
    kept = sum(1 for f in (out / "work").rglob("*.jsonl") for line in f.read_text().splitlines() if '"key"' in line)
    assert 8 <= kept < 30, kept  # rank 0's 8 and what the other had finished when torchrun stopped it
    resumed = run_launcher_process(*common, f"recipes.output.eval_results_dir={out}", "local.nproc_per_node=3",
                                   timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    first, again = samples(tmp_path / "ref", str(ROOT / TINY), "arith_answer"), samples(out, str(ROOT / TINY), "arith_answer")
    assert {d: s["resps"] for d, s in again.items()} == {d: s["resps"] for d, s in first.items()}
    asked = sum(json.loads(line)["n"] for f in (out / "work").rglob("*.jsonl") for line in f.read_text().splitlines()
                if '"asked"' in line)
    assert len(first) <= asked <= 1.05 * len(first), asked


@pytest.mark.slow
def test_a_lora_adapter_is_evaluated_over_its_base(tmp_path, monkeypatch):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.evaluate.__main__ import main

    model = AutoModelForCausalLM.from_pretrained(ROOT / TINY)
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"].endswith("tiny_grpo_model")
    data = {"run": {"model_name_or_path": str(tmp_path / "adapter"), "base_model_name": str(ROOT / TINY)},
            "evaluation": {"task": str(ROOT / CHOICE)}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.delenv("RANK", raising=False)
    assert main([f"--recipe={tmp_path / 'recipe.yaml'}", f"--out={tmp_path / 'out'}"]) == 0
    adapted = samples(tmp_path / "out", str(tmp_path / "adapter"), "arith_choice")
    base = samples(tmp_path / "out" / "base", str(ROOT / TINY), "arith_choice")
    assert any(adapted[d]["resps"] != base[d]["resps"] for d in adapted)  # the adapter's weights were applied


@pytest.mark.slow
def test_a_checkpoint_step_is_exported_once_and_scored_into_its_training_runs_mlflow_run(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    trained = run_launcher_process("recipes=llama/tiny_llama_sft", "action=local", f"local.run_dir={run_dir}",
                                   "recipes.training_config.training_args.max_steps=3",
                                   f"recipes.training_config.logging.mlflow.tracking_uri={mlflow_server.uri}",
                                   f"output_dir={tmp_path / 'out'}", timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    step, run_id = run_dir / "checkpoints" / "step-00000003", (run_dir / "mlflow_run_id").read_text()
    args = [RECIPE, f"recipes.run.model_name_or_path={step}", f"recipes.evaluation.task={CHOICE}", "action=local",
            f"recipes.output.mlflow_tracking_uri={mlflow_server.uri}", f"recipes.output.mlflow_run_id={run_id}"]
    first = run_launcher_process(*args, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"exporting {step}" in first.stdout and f"mlflow: run {run_id}, step 3" in first.stdout
    out = run_dir / "evaluation"  # beside the run it evaluates
    results = json.loads(next(out.glob("*/results_*.json")).read_text())
    history = MlflowClient(mlflow_server.uri).get_metric_history(run_id, "eval/arith_choice/acc/none")
    assert [(m.step, m.value) for m in history] == [(3, pytest.approx(results["results"]["arith_choice"]["acc,none"]))]
    again = run_launcher_process(*args, timeout=300)
    assert again.returncode == 0 and "exporting" not in again.stdout, again.stderr[-3000:]


@pytest.mark.slow
def test_while_training_each_checkpoint_is_scored_at_its_step_without_holding_the_training(tmp_path):
    run_dir = tmp_path / "run"
    trained = run_launcher_process("recipes=llama/tiny_llama_sft", "action=local", f"local.run_dir={run_dir}",
                                   f"recipes.training_config.evaluation.tasks=[{CHOICE}]",
                                   "recipes.training_config.evaluation.every_checkpoint=true",
                                   "recipes.training_config.evaluation.limit=20",
                                   "recipes.training_config.checkpoint.save_steps=2",
                                   "recipes.training_config.training_args.max_steps=4", timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    scored = {r["step"]: r["eval/arith_choice/acc/none"] for r in records if "eval/arith_choice/acc/none" in r}
    assert set(scored) == {2, 4}
    for step, value in scored.items():
        results = json.loads(next((run_dir / "evaluation").glob(f"*step-0000000{step}/results_*.json")).read_text())
        assert results["results"]["arith_choice"]["acc,none"] == pytest.approx(value)
        assert results["n-samples"]["arith_choice"]["effective"] == 20
    # rank 0 trained on while step 2 was evaluated: step 3 was logged before its scores existed
    step_3 = next(r["time"] for r in records if r.get("step") == 3 and "loss" in r)
    assert step_3 < (run_dir / "evaluation" / "step-00000002" / "scores.json").stat().st_mtime


def test_a_training_evaluation_task_that_cannot_run_is_the_dry_runs_one_line(launch, tmp_path):
    code, out, err = launch("recipes=llama/tiny_llama_sft", "recipes.training_config.evaluation.tasks=[strong_reject]")
    assert code != 0 and err.count("\n") == 1 and "training_config.evaluation.tasks: evaluation.task=strong_reject" in err


@pytest.mark.parametrize("task", VENDOR["task"])
def test_the_recipe_renders_a_cluster_job_for_every_vendor_task_it_can_run_and_refuses_the_rest(launch, tmp_path, task):
    strategy = next(iter(BENCHMARKS.get(task, {"gen_qa": None})))
    code, out, err = launch(RECIPE, "recipes.run.model_name_or_path=s3://models/tuned", f"recipes.evaluation.task={task}",
                            f"recipes.evaluation.strategy={strategy}", "recipes.run.data_s3_path=s3://data/qa.jsonl")
    if task in REFUSED_TASKS:
        assert code != 0 and err.count("\n") == 1 and f"evaluation.task={task}:" in err, err
        return
    assert code == 0, err
    configmap, job = [d for d in yaml.safe_load_all((tmp_path / "out" / "deterministic-model" / "manifest.yaml").read_text()) if d]
    assert job["kind"] == "HyperPodPyTorchJob"
    shipped = load_recipe(yaml.safe_load(configmap["data"]["recipe.yaml"]))
    assert check_recipe(shipped) == check_recipe(load_recipe({"run": {"model_name_or_path": "s3://models/tuned",
                                                                      "data_s3_path": "s3://data/qa.jsonl"},
                                                              "evaluation": {"task": task, "strategy": strategy}}))


# --- the LLM-as-judge recipe ---

JUDGE_RECIPE = "recipes=evaluation/open_source_llmaj_eval"


def generations(path: Path, responses: list[str]) -> Path:
    rows = [{"prompt": f"What is {i} plus {i}?", "response": r, "reference": str(2 * i)} for i, r in enumerate(responses)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def judge_server():
    sys.path.insert(0, str(ROOT / "scripts"))
    from judge_server import JudgeServer

    with JudgeServer() as judge:
        yield judge


def test_the_judge_recipe_renders_a_job_that_carries_its_generations_and_refuses_what_cannot_run(launch, tmp_path):
    tuned = generations(tmp_path / "tuned.jsonl", ["0", "2"])
    judge = [JUDGE_RECIPE, "recipes.run.judge_model_id=openai/judge", "recipes.judge.base_url=http://judge:8000/v1",
             f"recipes.run.inference_data_s3_path={tuned}"]
    code, out, err = launch(*judge, "recipes.llm_as_judge.metrics='Faithfulness,Correctness'", "recipes.run.replicas=2")
    assert code == 0, err
    assert "HyperPodPyTorchJob: 1 to 2 nodes of ml.m5.2xlarge, 1 judging process per node" in out
    configmap, job = [d for d in yaml.safe_load_all((tmp_path / "out" / "llmaj-model" / "manifest.yaml").read_text()) if d]
    shipped = yaml.safe_load(configmap["data"]["recipe.yaml"])
    carried = shipped["run"]["inference_data_s3_path"]
    assert configmap["data"][carried.removeprefix("/config/")] == tuned.read_text()
    for refused, named in ((["recipes.llm_as_judge.metrics=Faithfullness"], "did you mean Faithfulness?"),
                           (["recipes.llm_as_judge.metrics=WinRate"], "base_model_inference_data_s3_path"),
                           (["recipes.judge.api_key_env=JUDGE_KEY"], "cluster.secret_env.JUDGE_KEY")):
        code, out, err = launch(*judge, *refused)
        assert code != 0 and err.count("\n") == 1 and named in err, err


@pytest.mark.slow
def test_a_judged_evaluation_asks_each_verdict_once_across_processes_and_starts(tmp_path, judge_server):
    tuned = generations(tmp_path / "tuned.jsonl", ["0", "2", "4", "six", "8", "ten"])
    base = generations(tmp_path / "base.jsonl", ["~0", "~2", "four", "six", "~8", "ten"])
    args = [JUDGE_RECIPE, "recipes.run.judge_model_id=openai/tiny-judge", f"recipes.judge.base_url={judge_server.url}/v1",
            f"recipes.run.inference_data_s3_path={tuned}", f"recipes.run.base_model_inference_data_s3_path={base}",
            "recipes.llm_as_judge.metrics=[Faithfulness,Correctness,WinRate]", "action=local", "local.nproc_per_node=2",
            f"recipes.output.eval_results_dir={tmp_path / 'out'}"]
    first = run_launcher_process(*args, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(judge_server.requests) == 3 * 6  # one call per row and metric, over both processes
    table = {line.split()[0]: line.split()[1:] for line in first.stdout.splitlines()
             if line.split()[:1] and line.split()[0] in ("Faithfulness", "Correctness", "WinRate")}
    # the loopback judge's rule: the share of digits in the answer judged (tuned: 4 of 6 all digits)
    assert table["Correctness"][:3] == ["6", "0", f"{4 / 6:.4f}"] and table["Faithfulness"][:3] == ["6", "0", f"{4 / 6:.4f}"]
    share = lambda text: sum(c.isdigit() for c in text) / len(text)  # noqa: E731
    assert table["WinRate"][:3] == ["6", "0", f"{sum(map(share, ['0', '2', '4', 'six', '8', 'ten'])) / 6:.4f}"]
    verdicts = [json.loads(line) for line in (tmp_path / "out" / "verdicts.jsonl").read_text().splitlines()]
    assert len(verdicts) == 18
    again = run_launcher_process(*args[:-2], "local.nproc_per_node=3", f"recipes.output.eval_results_dir={tmp_path / 'out'}",
                                 timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(judge_server.requests) == 18  # every verdict from the ledger, at another size
    assert [line.split()[:4] for line in again.stdout.splitlines() if line.startswith("WinRate")] == \
        [["WinRate", *table["WinRate"][:3]]]


@pytest.mark.slow
def test_a_model_and_gen_qa_questions_in_a_bucket_with_the_results_copied_back(s3, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from conftest import bucket_keys
    from training.contract import buckets
    from training.evaluate.__main__ import main

    buckets.upload("test", ROOT / TINY, f"s3://{s3}/models/tiny")
    rows = [{"query": f"What is {i} plus {i}?", "response": str(2 * i)} for i in range(5)]
    buckets.put(buckets.client("test"), "test", f"s3://{s3}/qa.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    data = {"run": {"model_name_or_path": f"s3://{s3}/models/tiny", "data_s3_path": f"s3://{s3}/qa.jsonl"},
            "evaluation": {"task": "gen_qa", "strategy": "gen_qa", "metric": "all"}, "inference": {"max_new_tokens": 6},
            "output": {"eval_results_dir": f"s3://{s3}/results", "eval_tensorboard_results_dir": str(tmp_path / "tb")}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.delenv("RANK", raising=False)
    assert main([f"--recipe={tmp_path / 'recipe.yaml'}", f"--out={tmp_path / 'out'}", f"--scores={tmp_path / 's.json'}"]) == 0
    scored = json.loads((tmp_path / "s.json").read_text())
    assert {"eval/gen_qa/exact_match/none", "eval/gen_qa/bleu/none"} <= set(scored)
    copied = bucket_keys(s3, "results/")
    assert any(k.endswith(".json") and "/results_" in k for k in copied) and any("/samples_gen_qa_" in k for k in copied)
    events = EventAccumulator(str(next((tmp_path / "tb").glob("events.*")))).Reload()
    assert events.Scalars("eval/gen_qa/exact_match/none")[0].value == pytest.approx(scored["eval/gen_qa/exact_match/none"])


def test_a_local_evaluation_of_a_model_that_is_nowhere_is_one_line_before_anything_starts(launch, tmp_path):
    code, out, err = launch(RECIPE, f"recipes.run.model_name_or_path={tmp_path / 'nope'}", "action=local",
                            f"recipes.output.eval_results_dir={tmp_path / 'results'}")
    assert code != 0 and err.count("\n") == 1 and "run.model_name_or_path=" in err and "no such directory" in err
    assert not (tmp_path / "results").exists()
    code, out, err = launch(RECIPE)  # the recipe's default: no model
    assert code != 0 and "recipes.run.model_name_or_path is empty" in err
