"""GRPO with an LLM judge (the tiny RLAIF twin, judged by scripts/judge_server.py on loopback through
the real `openai` client; that it learns, as docs/grpo.md runs it: tests/test_grpo.py): rehearsed
asynchronously (a rollout process per node, one step behind) through every resize direction and a lost
node against a judge that fails now and then, it matches its fixed-size run with the same rewards at
every step (the reference takes the elastic run's verdicts, failed ones too) and asks the judge once
per distinct completion but for the calls in progress on the node killed outright; rollout processes ask it as the
training ranks would; a rank killed outright takes its reward process with it; the Converse path through the real `boto3` (the image's)."""

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from conftest import (ROOT, completion_rewards, killed_if_left, local_job, records, render_configs, running, train,
                      wait_for)
from elastic_launcher.local.run import child_pids

sys.path.insert(0, str(ROOT / "scripts"))
from judge_server import Fault, JudgeServer  # noqa: E402
from training.contract.judge import EXAMPLE_COMPLETION  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("test_rlaif")]
RECIPE = "llama/tiny_llama_grpo_rlaif"


def rewards_by_step(run_dir) -> dict[int, float]:
    return {r["step"]: r["reward"] for r in records(run_dir) if "reward" in r}


# 2 -> 3 -> 1 -> 2 nodes, a node killed two steps after the last resize's checkpoint (steps 6 and 7 drawn
# again), then 1 -> 2: five restarts, each resumed from a checkpoint and its ledger.
TRACE = "[{step:0,nodes:2},{step:2,nodes:3},{step:4,nodes:1},{step:5,nodes:2},{step:7,kill:true},{step:8,nodes:2}]"
STEPS = 10
MAX_WORKERS = 8  # the twin's judge.max_workers: the calls in progress at once, all processes together
METHOD = "recipes.training_config.training_args.method_args"
# One rollout process beside each node's training process, one step behind
ASYNCHRONOUS = [f"+{METHOD}.max_steps_off_policy=1", f"+{METHOD}.rollout_ranks_per_node=1",
                "recipes.trainer.nproc_per_node=2"]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The twin rehearsed asynchronously through TRACE, then its fixed-size run at 2 nodes, both judged by one server
    that answers a 500 (retried) and a 400 (not retried: the verdict fails, dropped) now and then:
    what it was asked, in order."""
    tmp = tmp_path_factory.mktemp("rlaif_rehearsal")
    with JudgeServer() as server:
        server.faults.extend(([Fault()] * 10 + [Fault(status=500, retry_after=0)] + [Fault()] * 25
                              + [Fault(status=400)]) * 100)
        done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}",
                               "recipes.elastic_policy.is_elastic=true", "action=rehearse",
                               f"{METHOD}.judge.base_url={server.url}/v1", *ASYNCHRONOUS,
                               f"recipes.training_config.training_args.max_steps={STEPS}",
                               f"local.trace={TRACE}", f"local.run_dir={tmp / 'run'}",
                               "local.timeout=500", f"output_dir={tmp / 'out'}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        # The verdicts asked: the launcher's probe before the run (an example completion) is none.
        asked = [r["text"] for r in server.requests if EXAMPLE_COMPLETION not in r["text"]]
        probes = len(server.requests) - len(asked)
    assert probes == 1
    return done, tmp / "run", tmp / "run" / "fixed", asked


def test_a_rehearsal_with_a_flaky_judge_matches_its_fixed_size_run_and_asks_each_verdict_once(rehearsal):
    """Every resize and the lost node, one step behind: the same completions and the same rewards at
    every step as the fixed-size run, failed verdicts included, and the judge asked once per distinct
    completion: the steps redone after the stops and the failure took their verdicts from the ledger
    (at a stop the rollout processes let their calls on their way finish into it), the fixed-size run
    took the elastic run's (it asked nothing), so a flaky judge cannot make a resize look guilty."""
    done, run_dir, fixed_dir, asked = rehearsal
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "vs fixed-size run: MATCHED" in done.stdout and "completions identical" in done.stdout
    assert completion_rewards(run_dir) == completion_rewards(fixed_dir) and len(completion_rewards(run_dir)) == STEPS
    fixed = rewards_by_step(fixed_dir)  # each step's mean: summed over the ranks in another order at another size
    assert all(abs(mean - fixed[step]) <= 1e-12 for step, mean in rewards_by_step(run_dir).items())
    redone = [r["step"] for r in records(run_dir) if r.get("event") == "resume"]
    assert len(redone) == 5  # four resizes and the failure
    steps = [r for r in records(run_dir) if "reward" in r]
    assert len({r["step"] for r in steps}) < len(steps)  # the failure's lost steps were drawn again
    assert sum(r["judge_calls"] for r in steps) + sum(r["judge_cached"] for r in steps) >= STEPS * 32
    assert sum(r["judge_failed_status"] for r in steps) > 0 and sum(r["judge_retries"] for r in steps) > 0
    assert sum(r["judge_dropped"] for r in steps) > 0
    assert all(r["judge_calls"] == 0 for r in records(fixed_dir) if "reward" in r)  # every verdict replayed
    assert sum(r.get("judge_input_tokens", 0) for r in records(run_dir)) > 0  # the elastic run asked, its reference not
    assert {r["policy_lag"] for r in steps} == {0, 1}
    # Asked once: a text asked again was a retry after a 500, or a call in progress when the node was killed
    # outright (at most max_workers), which its restart asks again.
    again = len(asked) - len(set(asked))
    assert again <= sum(r["judge_retries"] for r in steps) + MAX_WORKERS, Counter(Counter(asked).values())
    # The ledger holds no more than the steps after the last checkpoint need: nothing, at the end.
    assert all(not path.read_text() for path in (run_dir / "judge_ledger").glob("*.jsonl"))


def test_rollout_processes_ask_the_judge_once_per_completion_and_score_as_the_training_ranks_do(tmp_path):
    """method_args.rollout_ranks_per_node = 1 beside one training rank per node, one step behind: the
    rollout processes ask the judge, each completion once and none for a step past the schedule, into
    ledger files of their own; every completion and reward is the run's where the training ranks draw
    and ask (the same s), and each step's record carries the judge's account. The run with rollout
    processes stops after step 1 while their calls for step 2, drawn ahead, are on their way (each verdict
    takes 0.5 s): the calls finish into the ledger before the processes exit, so the restart, which draws
    step 2 again, asks none of them again."""
    runs, split = {}, tmp_path / "run1"
    with JudgeServer() as server:
        overrides = [f"{METHOD}.judge.base_url={server.url}/v1", f"+{METHOD}.max_steps_off_policy=1",
                     "recipes.training_config.training_args.max_steps=3"]
        done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}", "action=local",
                               *overrides, f"+{METHOD}.rollout_ranks_per_node=0", "recipes.trainer.nproc_per_node=1",
                               f"local.run_dir={tmp_path / 'run0'}", f"output_dir={tmp_path / 'out0'}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        runs[0] = [r["text"] for r in server.requests if EXAMPLE_COMPLETION not in r["text"]]
        configs = render_configs(tmp_path / "out1", *overrides, f"+{METHOD}.rollout_ranks_per_node=1",
                                 "recipes.trainer.nproc_per_node=2", recipe=RECIPE)
        server.faults.extend([Fault(delay=0.5)] * 1000)
        asked_before = len(server.requests)
        train(configs, split, nodes=2, stop_at_step=1, timeout=300)
        train(configs, split, nodes=2, timeout=300)
        runs[1] = [r["text"] for r in server.requests[asked_before:]]
    assert [r["step"] for r in records(split) if r.get("event") == "resume"] == [1]
    assert completion_rewards(split) == completion_rewards(tmp_path / "run0") and len(completion_rewards(split)) == 3
    steps = [r for r in records(split) if "reward" in r]
    assert [r["judge_calls"] + r["judge_cached"] for r in steps] == [32] * 3 and all(r["judge_s"] > 0 for r in steps)
    assert len(runs[1]) == len(set(runs[1])) == len(runs[0])  # none past step 3, none twice
    assert sum(r["judge_calls"] for r in steps) < len(runs[1])  # step 2's, asked before the stop, came from the ledger
    assert {p.name.split("-", 1)[1] for p in (split / "judge_ledger").glob("*.jsonl")} == \
        {"rank0.jsonl", "rank1.jsonl", "rollout0.jsonl", "rollout1.jsonl"}


def test_a_rank_killed_outright_takes_its_reward_process_with_it(tmp_path):
    """SIGKILL (an OOM kill, a lost node) to a rank whose reward process runs: within seconds nothing
    the rank started is left (the pool's worker and multiprocessing's resource tracker)."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=30",
                             recipe="llama/tiny_llama_grpo")
    run_dir = tmp_path / "run"
    proc = local_job(configs, run_dir).start(nodes=2, log=open(tmp_path / "log", "wb"))
    with killed_if_left(proc):
        wait_for(lambda: any("reward" in r for r in records(run_dir)), timeout=120, interval=0.1)
        rank = child_pids(proc.pid, running=True)[0]
        started = descendants(rank)
        assert started, "the rank's reward process is running"
        os.kill(rank, signal.SIGKILL)
        wait_for(lambda: not any(running(p) for p in started), timeout=10, interval=0.1)


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        children = [c for p in frontier for c in child_pids(p, running=True)]
        found += children
        frontier = children
    return found


@pytest.mark.parametrize("status", [None, 403])
def test_a_bedrock_judge_is_asked_through_boto3s_converse(tmp_path, image_python, status):
    """The image's boto3 against a Converse-speaking server: the verdict, the model id and inference
    settings as sent; a refused role (403) fails at once, without retries."""
    script = f"""
import json, os, sys
from pathlib import Path
from training.contract.judge import judge_settings
from training.rl.judge import Judge
s = judge_settings({{"model_id": "bedrock/deepseek.v3-v1:0", "base_url": sys.argv[1], "aws_region_name": "us-west-2",
                    "service_tier": "flex", "sampling_params": {{"temperature": 0.0, "top_p": 0.9,
                    "max_completion_tokens": 64}}, "prompt_template": "summary", "num_retries": 2}})
j = Judge(s, 0, 1, Path(sys.argv[2]), "a", "rank0")
v = j.submit(["Summarize: 12 cats."], ["12ab"], {{}}, lambda row: None, 1).result(30)[0]
print(json.dumps({{"score": v.score, "failure": v.failure, "retries": j.costs().judge_retries}}))
"""
    with JudgeServer() as server:
        if status:
            from judge_server import Fault
            server.faults.append(Fault(status=status))
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "PYTHONPATH": str(ROOT)}
        out = subprocess.run([image_python, "-c", script, server.url, str(tmp_path / "ledger")], capture_output=True,
                             text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        (request,) = server.requests
    assert request["path"] == "/model/deepseek.v3-v1%3A0/converse" or request["path"] == "/model/deepseek.v3-v1:0/converse"
    assert request["body"]["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.0, "topP": 0.9}
    assert request["body"]["serviceTier"] == {"type": "flex"}
    if status:
        assert got["failure"].startswith("refused: 403 AccessDeniedException") and got["retries"] == 0
    else:
        assert got == {"score": 0.5, "failure": None, "retries": 0}


def test_a_judge_that_dies_after_the_start_is_said_each_step_and_stops_the_run_with_a_checkpoint(tmp_path):
    """The judge answers the launcher's probe, then refuses every request (400, not retried): each
    step warns naming it, the kind and one failure; the flat groups are blamed on it; after
    judge.max_failed_steps (3) such steps the run stops with one error line and that step's
    checkpoint, whatever on_failure (drop) says."""
    from judge_server import Fault

    with JudgeServer() as server:
        server.faults.extend([Fault()] + [Fault(status=400)] * 1000)
        done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}", "action=local",
                               f"recipes.training_config.training_args.method_args.judge.base_url={server.url}/v1",
                               "recipes.training_config.training_args.max_steps=10",
                               f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    judge = f"openai/tiny-judge at {server.url}/v1"
    assert (f"error: the judge {judge} failed every verdict for 3 steps in a row (training_config.training_args."
            f"method_args.judge.max_failed_steps=3)") in done.stderr, done.stderr[-3000:]
    warnings = [r for r in records(tmp_path / "run") if r.get("event") == "warning"]
    assert [w["step"] for w in warnings if w["message"].startswith(f"the judge {judge}: 32 of 32 verdicts failed")] \
        == [1, 2, 3], warnings
    assert "one of them: status: 400 scripted 400" in warnings[0]["message"]
    assert any("the judge's verdicts failed (32 status of 32 calls), not the reward's shape" in w["message"]
               for w in warnings)
    assert max(r["step"] for r in records(tmp_path / "run") if "reward" in r) == 3
    assert (tmp_path / "run" / "checkpoints" / "step-00000003" / "COMPLETE").exists()
