"""GRPO through the trainer on the tiny Llama (data/grpo_tiny.jsonl): docs/grpo.md's commands run as
written; it learns (resized, it matches a fixed-size run: tests/test_rlaif.py with a judge's rewards,
tests/test_agents.py in place with an agent's rollouts, tests/test_grpo_async.py behind its policy); its rollouts and its step do
not depend on the world size; a stop during a rollout abandons the step, which the restart redoes alike,
as does one between two updates with no time to finish them; and a reward function that fails ends the
run in one line."""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import (CORRECTION_TOLERANCE, ROOT, assert_stops_cleanly, completions_by_step, killed_if_left, local_job,
                      one_step_at_each_size, own_processes, records, render_configs, step_records, tracked_copy, train,
                      wait_for)
from elastic_launcher.local.run import child_pids
from training.contract.checkpoint_dirs import step_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.xdist_group("test_grpo")]  # on one worker: its tests share module fixtures
RECIPE = "llama/tiny_llama_grpo"


# Whichever of these runs first pays for docs/grpo.md's runs (three of 30 steps) in its set-up.
READS_THE_PAGES_RUNS = pytest.mark.timeout(1200)


def fenced_commands(page: Path) -> list[str]:
    """The shell commands of a page's ```bash blocks, in order, comments dropped."""
    text = page.read_text()
    return [line.split("#")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
            for line in block.splitlines() if line.split("#")[0].strip()]


@pytest.fixture(scope="module")
def docs_commands(tmp_path_factory, vllm_python):
    """Every fenced command of docs/grpo.md, pasted as written (in order, in a copy of the checkout, with
    `python` this interpreter; the vLLM tier's cached venv is the one the suite built): each command
    and what it printed."""
    commands = fenced_commands(ROOT / "docs" / "grpo.md")
    tmp = tmp_path_factory.mktemp("docs_grpo")
    copy = tracked_copy(tmp / "checkout")
    shim = tmp / "bin"
    shim.mkdir()
    (shim / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    printed = []
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        printed.append((command, done.stdout, done.stderr))
    return copy, printed


@pytest.fixture(scope="module")
def fixed(docs_commands):
    """The recipe as shipped, at 2 nodes: docs/grpo.md's first command (its rehearsals: tests/test_rlaif.py,
    the same method with a judge's rewards; tests/test_agents.py, in place with an agent's rollouts)."""
    copy, printed = docs_commands
    assert printed[0][0] == f"python launcher.py recipes={RECIPE} action=local"
    return copy / "runs" / "tiny-llama-grpo"


@READS_THE_PAGES_RUNS
def test_docs_grpo_commands_run_as_written_on_cpu(docs_commands):
    """The tiny twin trains, its completions are shown, the RLAIF twin trains against the loopback
    judge, the catalogue recipe's rollout behind its policy plans, the twin whose rollout runs behind
    its policy trains, and the vLLM tier's environment and the vLLM twin's run work."""
    _, printed = docs_commands
    assert len(printed) == 7 and sum("launcher.py" in c for c, _, _ in printed) == 6, printed
    for command, out, err in printed:
        if "launcher.py" in command and "action=" not in command:  # a dry run
            assert "\nrollouts behind: step t trains on a batch drawn by the policy after step max(0, t-1-2)" in out
        elif "action=samples" in command:
            assert out.startswith("step 30 of ") and "best:" in out and "worst:" in out
        elif "launcher.py" in command:
            assert "\ndone: 30 steps in " in out, out[-2000:]
            # quiet: the data said once, no semaphore left to multiprocessing's tracker (the rollout processes' queues)
            assert [line.startswith("data: ") for line in (out + err).splitlines()].count(True) == 1, out + err
            assert "leaked semaphore" not in err, err[-2000:]


def assert_exported_model_generates(run_dir) -> None:
    """The run's Hugging Face export loads in transformers and generates."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "hf")
    ids = torch.tensor([[1, 5, 284, 266, 338, 17, 25, 37, 2, 6]])
    assert model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False).shape == (1, 14)


@READS_THE_PAGES_RUNS
def test_the_tiny_twin_learns_its_task_and_exports_a_model(fixed):
    """The recipe as shipped (its fixed-size run, from the shipped warm start): math_verify's mean over
    its last ten steps is at least twice that of its first ten and the completions end within their
    budget (docs/grpo.md says so), every step logs GRPO's metrics, and the trained model is exported
    for transformers."""
    run_dir = fixed
    steps = step_records(run_dir)
    verified = [steps[s]["reward_math_verify"] for s in sorted(steps)]
    assert len(verified) == 30 and [steps[s]["reward"] for s in sorted(steps)] == verified
    assert statistics.mean(verified[-10:]) >= 2 * statistics.mean(verified[:10]) > 0, verified
    cut = [steps[s]["cut_fraction"] for s in sorted(steps)]
    assert statistics.mean(cut[-10:]) <= 0.1, cut
    last = steps[max(steps)]
    for key in ("reward_std", "reward_math_verify", "flat_groups",
                "completion_tokens_mean", "completion_tokens_max", "cut_fraction", "kl", "clip_fraction", "entropy",
                "rollout_s", "weight_sync_s", "reward_s", "rollout_tokens_per_s"):
        assert key in last and last[key] is not None, key
    assert 0 <= last["flat_groups"] <= 1 and last["completion_tokens_max"] <= 8 and last["kl"] > 0
    assert 0 < last["weight_sync_s"] < last["rollout_s"] < last["step_time"]
    assert_exported_model_generates(run_dir)


@READS_THE_PAGES_RUNS
def test_the_vllm_twin_learns_as_the_trainer_sampler_twin_does_and_exports(docs_commands):
    """docs/grpo.md's run on vLLM's CPU build (tests/test_vllm_rollouts.py: its engine and resizes):
    the mean reward of its last ten steps at least twice its first ten's, as the twin above; after
    every weight sync (full parameters) the rollout correction's mean weight is 1, so every tensor the
    engine computes with is the policy's of that step; the exported model generates under transformers."""
    run_dir = docs_commands[0] / "runs" / "tiny-grpo-vllm"
    steps = step_records(run_dir)
    rewards = [steps[s]["reward"] for s in sorted(steps)]
    assert len(rewards) == 30 and statistics.mean(rewards[-10:]) >= 2 * statistics.mean(rewards[:10]) > 0, rewards
    weights = [r["rollout_correction_weight"] for r in steps.values()]
    assert all(abs(w - 1) < CORRECTION_TOLERANCE for w in weights), weights
    assert_exported_model_generates(run_dir)


@READS_THE_PAGES_RUNS
def test_the_twin_whose_rollout_runs_two_steps_behind_learns(docs_commands):
    """docs/grpo.md's run of recipes/llama/tiny_llama_grpo_async (tests/test_grpo_async.py: rehearsed
    through traces/demo.yaml, killed and resumed at another size): each step's batch drawn by the policy after step max(0, t-3), the
    correction weighing its tokens, and the mean reward of its last ten steps at least 1.5 times its
    first ten's."""
    steps = step_records(docs_commands[0] / "runs" / "tiny-llama-grpo-async")
    assert sorted(steps) == list(range(1, 31))
    assert [steps[t]["policy_lag"] for t in sorted(steps)] == [min(t - 1, 2) for t in sorted(steps)]
    assert all(0 < steps[t]["rollout_correction_ess"] <= 1 for t in steps)
    rewards = [steps[t]["reward"] for t in sorted(steps)]
    assert statistics.mean(rewards[-10:]) >= 1.5 * statistics.mean(rewards[:10]) > 0, rewards


@READS_THE_PAGES_RUNS
def test_the_tiny_rlaif_twin_learns_what_its_judge_rewards(docs_commands):
    """docs/grpo.md's RLAIF run against the loopback judge (tests/test_rlaif.py: a flaky judge through
    resizes): the mean reward of its last ten steps more than twice its first ten's, every completion
    judged, the judge's the only reward."""
    steps = step_records(docs_commands[0] / "runs" / "tiny-llama-grpo-rlaif")
    rewards = [steps[s]["reward"] for s in range(1, 31)]
    assert statistics.mean(rewards[-10:]) > 2 * statistics.mean(rewards[:10]), rewards
    assert steps[30]["judge_calls"] + steps[30]["judge_cached"] == 32 and steps[30]["reward"] == steps[30]["reward_judge"]
    assert sum(r.get("judge_input_tokens", 0) for r in steps.values()) > 0


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
    """One step of the recipe at 1, 2 and 3 processes, from the same initial model, with audit."""
    return one_step_at_each_size(tmp_path_factory.mktemp("one_step"), RECIPE,
                                 "recipes.training_config.logging.audit_samples=true",
                                 "recipes.training_config.training_args.method_args.rewards="
                                 "[math_verify,data/grpo_tiny_rewards.py:digits]",
                                 "recipes.training_config.training_args.eval_steps=1",
                                 "recipes.training_config.datasets.train_val_split_ratio=0.95")


@pytest.mark.timeout(1200)
def test_the_tiny_twins_rehearsal_through_the_demo_trace_is_matched_within_float32s_reordering(tmp_path):
    """docs/grpo.md's tiny twin, from its warm start (a chaotic run: its KL climbs, its grad norm spikes),
    through traces/demo.yaml (2 -> 3 -> 1 -> 2 nodes and a node killed, the recipe's 30 steps): every
    step's completions are the fixed-size run's, and its entropy drifts no further than float32's
    reordering does: where it passes the strict bound, a fixed-size run at 3 nodes measures that."""
    from elastic_launcher.local.report import STRICT

    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}",
                           "recipes.elastic_policy.is_elastic=true", "action=rehearse", "local.trace=traces/demo.yaml",
                           f"local.run_dir={run_dir}", "local.timeout=900", f"output_dir={tmp_path / 'out'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((run_dir / "rehearsal_report.json").read_text())
    assert [(t["from_nodes"], t["to_nodes"]) for t in report["transitions"] if t["cause"] == "resize"][:3] == \
        [(2, 3), (3, 1), (1, 2)]
    assert report["samples_identical"] and report["matched"], done.stdout[-2000:]
    assert "vs fixed-size run: MATCHED" in done.stdout and "completions identical" in done.stdout
    if report["max_rel_diff"] > STRICT:  # reordering measured, not assumed
        assert report["reordering_nodes"] == 3 and (run_dir / "fixed-n3" / "metrics.jsonl").exists()
        assert "within float32's reordering (a fixed-size run at 3 nodes drifts up to" in done.stdout


def test_a_rollout_draws_the_same_completions_at_1_2_and_3_ranks(one_step):
    completions = {n: sorted(map(tuple, map(json.dumps, records(run, "samples.jsonl")[0]["completions"])))
                   for n, run in one_step.items()}
    assert len(completions[1]) == 8 * 4  # every prompt's group: num_generations each
    assert completions[1] == completions[2] == completions[3]


def test_a_steps_completions_are_kept_readable_and_shown_best_and_worst(one_step, capsys):
    """samples.jsonl holds each completion decoded beside its prompt, with its reward and each
    function's score (the same at any size); `action=samples` prints the step's best and worst."""
    from transformers import AutoTokenizer

    from elastic_launcher.cli import main

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "tiny_tokenizer")
    record = records(one_step[2], "samples.jsonl")[0]
    readable = {(r["sample_id"], r["index"]): r for r in record["readable"]}
    assert len(readable) == 8 * 4 and set(readable) == {(sid, i) for sid, i, _ in record["completions"]}
    for sid, i, ids in record["completions"]:
        row = readable[(sid, i)]
        assert row["completion"] == tokenizer.decode(ids, skip_special_tokens=True) and "plus" in row["prompt"]
        assert set(row["rewards"]) == {"math_verify", "digits"}
        assert row["reward"] == pytest.approx(sum(row["rewards"].values()))
    step = next(r for r in records(one_step[2]) if "reward" in r)
    for name in ("math_verify", "digits"):  # each function's mean over the step's completions
        scores = [r["rewards"][name] for r in record["readable"]]
        assert step[f"reward_{name}"] == pytest.approx(sum(scores) / len(scores))
    assert sorted(map(json.dumps, records(one_step[1], "samples.jsonl")[0]["readable"])) == \
        sorted(map(json.dumps, record["readable"]))
    capsys.readouterr()
    assert main([f"recipes={RECIPE}", "action=samples", f"local.run_dir={one_step[2]}", "local.show=2"]) == 0
    out = capsys.readouterr().out
    best = max(record["readable"], key=lambda r: r["reward"])
    assert out.startswith(f"step 1 of {one_step[2]}: 32 completions, mean reward ")
    assert out.index("best:") < out.index(f"reward {best['reward']:.3f}") < out.index("worst:")
    assert out.count("    completion: ") == 4


def test_evaluation_completes_each_validation_prompt_greedily_the_same_at_every_size(one_step):
    evals = {n: [r for r in records(run) if "eval_reward" in r] for n, run in one_step.items()}
    assert all(len(e) == 1 for e in evals.values())
    one = evals[1][0]["eval_reward"]  # the same rewards, summed over ranks in another order (float64)
    assert evals[2][0]["eval_reward"] == pytest.approx(one, rel=1e-12)
    assert evals[3][0]["eval_reward"] == pytest.approx(one, rel=1e-12)


def test_the_step_is_the_same_at_1_and_3_ranks(one_step):
    """The same prompts, completions and rewards, and the loss averaged over every rank's completion
    tokens: the step's loss, KL and gradient norm equal up to float32's roundings."""
    one, three = step_records(one_step[1])[1], step_records(one_step[3])[1]
    for key in ("reward", "completion_tokens_mean"):  # the same numbers, summed over ranks in another order
        assert three[key] == pytest.approx(one[key], rel=1e-12), key
    for key in ("loss", "kl", "entropy", "grad_norm"):
        assert three[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key


SLOW_WHEN_ASKED = '''
import time
from pathlib import Path


def slow_when_asked(prompts, completions, **columns):
    """Weighted 0: scores nothing. Holds a rollout in its wait for rewards while a file asks it to."""
    here = Path(__file__).parent
    if (here / "slow").exists():
        (here / "scoring").touch()
        time.sleep(60)
    return [0.0] * len(completions)
'''


STOPPABLE = ("recipes.training_config.training_args.max_steps=2", "recipes.training_config.logging.audit_samples=true",
             "recipes.training_config.training_args.eval_steps=0",
             "recipes.training_config.training_args.method_args.rewards=[math_verify,data/grpo_tiny_rewards.py:digits,"
             "{here}/rewards.py:slow_when_asked]",
             "+recipes.training_config.training_args.method_args.reward_weights=[1.0,1.0,0.0]")


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory):
    """Two steps of the recipe with a weight-0 reward that a file can hold up, at one rank: the run
    a stopped and restarted one must equal."""
    tmp = tmp_path_factory.mktemp("grpo_never_stopped")
    (tmp / "rewards.py").write_text(SLOW_WHEN_ASKED)
    configs = render_configs(tmp / "configs", *(o.format(here=tmp) for o in STOPPABLE), recipe=RECIPE)
    train(configs, tmp / "run", nodes=1)
    return tmp, configs


def assert_redone_alike(run_dir, never_stopped) -> None:
    """Restarted at one rank, the run draws the completions and rewards of the run never stopped."""
    tmp, configs = never_stopped
    train(configs, run_dir, nodes=1)
    assert completions_by_step(run_dir) == completions_by_step(tmp / "run")
    redone, fixed = step_records(run_dir)[2], step_records(tmp / "run")[2]
    assert redone["reward"] == fixed["reward"] and redone["reward_math_verify"] == fixed["reward_math_verify"]


def test_a_stop_during_the_rollout_abandons_the_step_and_the_restart_redoes_it_alike(never_stopped):
    """SIGTERM to both ranks while step 2's rollout waits on a reward: each exits 0 within seconds
    (the reward's call is dropped with its process, not waited for), the checkpoint is step 1's and
    no step 2 is logged; restarted at one rank, step 2 draws the completions and rewards of a run
    that was never stopped."""
    tmp, configs = never_stopped
    run_dir, log = tmp / "rollout_stop", tmp / "rollout_stop.log"
    proc = local_job(configs, run_dir).start(nodes=2, log=open(log, "wb"))
    try:
        with killed_if_left(proc):
            wait_for(lambda: 1 in step_records(run_dir), timeout=120, interval=0.05)
            (tmp / "slow").touch()
            wait_for(lambda: (tmp / "scoring").exists(), timeout=60, interval=0.02)
            for pid in child_pids(proc.pid):
                os.kill(pid, signal.SIGTERM)
            assert_stops_cleanly(proc, log)  # not after the reward's 60 s
    finally:
        (tmp / "slow").unlink(missing_ok=True)
    stops = [r for r in records(run_dir) if r.get("event") == "stop"]
    assert stops and all(r["step"] == 1 and r["abandoned"] == "rollout" for r in stops), stops
    assert set(step_records(run_dir)) == {1} and step_dir(run_dir / "checkpoints", 1).is_dir()
    assert not own_processes(str(run_dir))
    assert_redone_alike(run_dir, never_stopped)


# Each rank sends itself a real SIGTERM in its first update of step 2 and goes on once the trainer's
# signal thread has taken it: the stop lands between the step's two updates on every run.
SIGNALLED_IN_AN_UPDATE = '''
import os, signal, sys, time

from training.methods.grpo import GRPO

forward_backward, calls = GRPO.forward_backward, []


def signalled_in_step_2s_first_update(self, *a, **k):
    calls.append(1)
    if len(calls) == self.options.mini_batches + 1:
        os.kill(os.getpid(), signal.SIGTERM)
        while not STOP.requested:
            time.sleep(0.01)
    return forward_backward(self, *a, **k)


if __name__ == "__main__":  # not again in the reward process, which imports this module
    from training.runtime.arguments import parse_args
    from training.runtime.elastic import ElasticStop, die_with_parent
    from training.worker import main

    args = parse_args()
    die_with_parent()
    STOP = ElasticStop()
    GRPO.forward_backward = signalled_in_step_2s_first_update
    code = main(args, stop=STOP)
    sys.stdout.flush()
    os._exit(code)
'''


def test_a_stop_between_two_updates_that_cannot_finish_in_time_exits_and_the_restart_redoes_the_step(never_stopped):
    """A SIGTERM between step 2's two updates on both ranks, with no graceful time to finish them
    and save (ELASTIC_STOP_WAIT_S=0): the weights belong to no step, so each rank exits 0 without a
    checkpoint, and the restart resumes from the newest one (step 1's, saved every step here),
    drawing the completions and rewards of a run never stopped. (Where finishing fits, the step ends
    and its stop saves, as any step's: tests/test_training_units.py holds the rule.)"""
    tmp, _ = never_stopped
    run_dir, log = tmp / "update_stop", tmp / "update_stop.log"
    configs = render_configs(tmp / "configs_update_stop", *(o.format(here=tmp) for o in STOPPABLE),
                             "recipes.training_config.checkpoint.save_steps=1", recipe=RECIPE)
    (tmp / "signalled.py").write_text(SIGNALLED_IN_AN_UPDATE)
    job = local_job(configs, run_dir)
    command = job.command(2)
    at = command.index("-m", 3)  # torchrun's entry point: the trainer, wrapped
    command[at:at + 2] = [str(tmp / "signalled.py")]
    done = subprocess.run(command, env={**job.env(2), "ELASTIC_STOP_WAIT_S": "0"}, cwd=ROOT,
                          stdout=open(log, "wb"), stderr=subprocess.STDOUT, timeout=240)
    assert done.returncode == 0, log.read_text()[-3000:]
    stops = [r for r in records(run_dir) if r.get("event") == "stop"]
    assert [(r["step"], r.get("abandoned")) for r in stops] == [(1, "updates")], stops
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step"))
    assert set(step_records(run_dir)) == {1} and checkpoints == [step_dir(run_dir / "checkpoints", 1).name]
    assert "exiting without a checkpoint; the restart resumes from step 1" in log.read_text()
    assert_redone_alike(run_dir, never_stopped)


FLAT = '''
def same_for_all(completions, **columns):
    return [1.0] * len(completions)
'''


def test_a_run_whose_rewards_teach_nothing_is_told_so_while_it_runs_and_where_it_ends(tmp_path):
    """Every completion scored alike: from the third step the run says in one line that its groups
    carry no signal and which keys to change, once, and again where it ends."""
    (tmp_path / "flat.py").write_text(FLAT)
    done = subprocess.run(
        [sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}", "action=local",
         f"recipes.training_config.training_args.method_args.rewards=[{tmp_path / 'flat.py'}:same_for_all]",
         "recipes.training_config.training_args.max_steps=4", f"local.run_dir={tmp_path / 'run'}",
         f"output_dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if "no learning signal" in line]
    assert [line.split(":")[0] for line in lines] == ["warning (step 3)", "warning (step 4)"], done.stdout[-3000:]
    assert "100% of the groups scored all their completions alike" in lines[0] and "this run: no learning" in lines[1]


FAILING = '''
def flaky(prompts, completions, **columns):
    return [1.0 if i != 3 else float("nan") for i in range(len(completions))]
'''


def test_a_reward_that_returns_nan_ends_the_run_in_one_line_naming_it(tmp_path):
    (tmp_path / "bad_rewards.py").write_text(FAILING)
    done = subprocess.run(
        [sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}", "action=local",
         f"recipes.training_config.training_args.method_args.rewards=[{tmp_path / 'bad_rewards.py'}:flaky]",
         f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "bad_rewards.py:flaky scored sample" in errors[0] and "nan" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not own_processes(str(tmp_path))


GRADIENTS = '''
import json, sys
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, sys.argv[1])
from conftest import tiny_causal_lm
from training.contract.batching import plan_batches
from training.contract.config import TrainingArgs
from training.batches import BatchShape
from training.methods.base import RunInfo
from training.methods.grpo import GRPO, Args
from training.rl.experience import Experience
from training.model.causal_lm import apply_fsdp
from training.rl.rollout import Completion, PromptGroup

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
B, N = 6, 3  # prompts per step, completions per prompt


def sharded(seed):
    model = apply_fsdp(tiny_causal_lm("llama", seed=seed, float64=True), init_device_mesh("cpu", (world,)), "fp32")
    model.compute_dtype = torch.float64
    return model


model = sharded(0)
args = TrainingArgs(train_batch_size=B, micro_train_batch_size=1)
plan = plan_batches(args, world)
micro_completions = int(sys.argv[3]) if len(sys.argv) > 3 else None  # None: one prompt's group per micro-batch
method = GRPO(args, Args(num_generations=N, mini_batches=3, kl_coef=0.1, max_prompt_length=8, max_new_tokens=8,
                         micro_completions=micro_completions),
              torch.device("cpu"))
method.shape, method.run = BatchShape(N, 16, False), RunInfo(None, plan, rank)
method.reference = sharded(1).requires_grad_(False)

# The step's rollout, the same on every rank: prompts of 3-7 tokens, completions of 1-8, rewards.
draw = torch.Generator().manual_seed(7)
prompts = [[int(t) for t in torch.randint(3, 97, (int(torch.randint(3, 8, (1,), generator=draw)),), generator=draw)]
           for _ in range(B)]
completions = [[Completion(s, i, tuple(int(t) for t in torch.randint(3, 97, (int(torch.randint(1, 9, (1,), generator=draw)),),
                                                                        generator=draw)), True) for i in range(N)]
               for s in range(B)]
rewards = torch.rand(B * N, generator=draw, dtype=torch.float64).tolist()
mine = range(plan.offsets[rank], plan.offsets[rank] + plan.local_batches[rank])
method._rollout = lambda model, rows, step: Experience([PromptGroup(s, tuple(prompts[s])) for s in mine],
                                                       [completions[s] for s in mine],
                                                       [rewards[s * N + i] for s in mine for i in range(N)], {})
rows = [{"sample_ids": [s], "prompt_ids": prompts[s]} for s in mine]
gradients = []
for update in method.updates(model, [{"prompts": rows}], step=0).updates:
    counts = torch.tensor([float(sum(m["label_tokens"] for m in update))], dtype=torch.float64)
    dist.all_reduce(counts)
    method.forward_backward(model, update, counts[0], B)
    gradients.append(torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()]).tolist())
    model.zero_grad(set_to_none=True)
if rank == 0:
    with open(sys.argv[2], "w") as f:
        json.dump(gradients, f)
dist.destroy_process_group()
'''


def test_each_updates_gradient_is_the_same_at_1_and_3_ranks_in_float64(tmp_path):
    """The same rollout (6 prompts x 3 completions, split into 3 updates of every third prompt) at 1
    and 3 ranks: at 3, each rank holds two prompts, so in one update it runs an empty micro-batch;
    every update's gradient equals the single rank's. The model runs in float64, but FSDP's
    gradient reduction across ranks on gloo does not keep float64's precision: one micro-batch on one
    rank, the others' contributions exactly zero, already differs from the single rank's gradient
    by up to 1e-7 of its scale (measured); a wrong normalization would differ by tens of percent.
    Micro-batches of fewer completions than a group (method_args.micro_completions, for long
    completions) give the same gradient."""
    script = tmp_path / "gradients.py"
    script.write_text(GRADIENTS)
    got = {}
    for name, world, micro_completions in (("one", 1, []), ("three", 3, []), ("split", 1, ["2"])):
        out = tmp_path / f"grads{world}{micro_completions}.json"
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
                               str(script), str(ROOT / "tests"), str(out), *micro_completions], cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr[-3000:]
        got[name] = torch.tensor(json.loads(out.read_text()), dtype=torch.float64)
    assert got["one"].shape[0] == 3 and got["one"].abs().max() > 0
    for one, three in zip(got["one"], got["three"]):
        assert (three - one).abs().max() <= 1e-6 * one.abs().max()
    # micro-batches of 2 completions split each group of 3: on one rank, only the summation order differs
    for one, split in zip(got["one"], got["split"]):
        assert (split - one).abs().max() <= 1e-12 * one.abs().max()
