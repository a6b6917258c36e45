"""An agent through the trainer (recipes/llama/tiny_llama_agent.yaml): multi-turn rollouts with a tool,
from its SFT warm start. Its trajectories, the model's turns and the tool's replies, are the same at 1,
2 and 3 ranks token for token, and resized in place under the real agents they are a fixed-size run's;
it learns to use its tool; the metrics and samples say what the agent did."""

import json
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, one_step_at_each_size, own_processes, records, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("test_agents")]
RECIPE = "llama/tiny_llama_agent"


def trajectories_by_step(run_dir) -> dict[int, list[str]]:
    """Each step's trajectories (ids, tokens and loss masks), the last attempt's."""
    return {r["step"]: sorted(map(json.dumps, r["completions"])) for r in records(run_dir, "samples.jsonl")}


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
    """One step of the recipe at 1, 2 and 3 processes, from the same model."""
    return one_step_at_each_size(tmp_path_factory.mktemp("agent_one_step"), RECIPE)


def test_an_agents_trajectories_are_the_same_at_1_2_and_3_ranks_bitwise(one_step):
    """The model's turns and the tool's replies, token for token, with their loss masks."""
    trajectories = {n: trajectories_by_step(run)[1] for n, run in one_step.items()}
    assert len(trajectories[1]) == 8 * 8  # every prompt's group
    assert trajectories[1] == trajectories[2] == trajectories[3]
    masks = [json.loads(t)[3] for t in trajectories[1]]
    assert any(0 in mask and 1 in mask for mask in masks)  # the tool's replies inside the model's turns


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """The recipe as shipped, at 2 nodes."""
    run_dir = tmp_path_factory.mktemp("agent_fixed") / "run"
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}", "action=local",
                           f"local.run_dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir


def test_the_tiny_agent_learns_to_use_its_tool_and_says_what_it_did(fixed, capsys):
    """The fixed-size run: the mean reward of the last ten steps is at least twice the first ten's
    (docs/agents.md says so); every step logs the agent's metrics; its samples show the turns."""
    from elastic_launcher.cli import main

    run_dir = fixed
    steps = {r["step"]: r for r in records(run_dir) if "reward" in r}
    rewards = [steps[s]["reward"] for s in sorted(steps)]
    assert statistics.mean(rewards[-10:]) >= 2 * statistics.mean(rewards[:10]) > 0, rewards
    last = steps[max(steps)]
    for key in ("turns_mean", "tool_calls_mean", "tool_calls_lookup", "tool_errors", "tool_timeouts",
                "ended_max_turns", "ended_max_total_tokens", "environment_s", "rollout_s"):
        assert key in last, key
    assert 1 <= last["turns_mean"] <= 3 and 0 < last["tool_calls_lookup"] <= last["tool_calls_mean"]
    assert last["tool_timeouts"] == 0 and 0 <= last["environment_s"] < last["rollout_s"]
    capsys.readouterr()
    assert main([f"recipes={RECIPE}", "action=samples", f"local.run_dir={run_dir}", "local.show=1"]) == 0
    out = capsys.readouterr().out
    assert "turn 1: <tool_call>" in out and "  lookup -> " in out and "ended: " in out
    assert "# Tools" not in out  # the prompt as the data gives it, not the template's tools


def test_an_agents_rehearsal_under_real_agents_resizes_in_place_and_matches(tmp_path, image_python):
    """`elastic_policy.in_place=true` under the HyperPod agents, 2 -> 1 -> 2 nodes: each resize keeps the
    workers' processes (the reward process, where the environments live, and the sampler made again in
    them), the trajectories match a fixed-size run's, and no process is left."""
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}",
                           "recipes.elastic_policy.is_elastic=true", "recipes.elastic_policy.in_place=true",
                           "action=rehearse", "local.trace=[{step:0,nodes:2},{step:3,nodes:1},{step:6,nodes:2}]",
                           f"local.agent_python={image_python}", f"local.run_dir={tmp_path / 'run'}",
                           "local.timeout=800", f"output_dir={tmp_path / 'out'}",
                           "recipes.training_config.training_args.max_steps=8"],
                          cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "rehearsal_report.json").read_text())
    assert [(t["from_nodes"], t["to_nodes"], t["restart"]) for t in report["transitions"]] == [(2, 1, "in place"),
                                                                                               (1, 2, "in place")]
    assert report["matched"] is True and "consumed sample ids and completions identical" in done.stdout
    assert trajectories_by_step(run_dir) == trajectories_by_step(run_dir / "fixed")
    assert wait_for(lambda: not own_processes(tmp_path), timeout=30), "agents, workers or reward processes left"
