"""An agent through the trainer (recipes/llama/tiny_llama_agent.yaml): multi-turn rollouts with a tool,
from its SFT warm start. It learns to use its tool; resized through the demo trace (2 -> 3 -> 1 -> 2
nodes, a node killed) and in place under the real agents, its trajectories, the model's turns and
the tool's replies, are a fixed-size run's token for token; and the metrics and samples say what the
agent did."""

import json
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, records, wait_for, own_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("test_agents")]
RECIPE = "llama/tiny_llama_agent"


def trajectories_by_step(run_dir) -> dict[int, list[str]]:
    """Each step's trajectories (ids, tokens and loss masks), the last attempt's."""
    return {r["step"]: sorted(map(json.dumps, r["completions"])) for r in records(run_dir, "samples.jsonl")}


def rehearse(tmp, trace: str, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}",
                           "recipes.elastic_policy.is_elastic=true", "action=rehearse", f"local.trace={trace}",
                           f"local.run_dir={tmp / 'run'}", "local.timeout=800", f"output_dir={tmp / 'out'}", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=880)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The recipe as shipped, rehearsed through traces/demo.yaml, then its fixed-size run at 2 nodes."""
    tmp = tmp_path_factory.mktemp("agent_rehearsal")
    return rehearse(tmp, str(ROOT / "traces" / "demo.yaml")), tmp / "run", tmp / "run" / "fixed"


def test_an_agents_rehearsal_through_the_demo_trace_matches_the_fixed_size_run(rehearsal):
    """At 1, 2 and 3 ranks, across every resize and the node failure (and every step drawn again
    after it): the same trajectories, bitwise."""
    done, run_dir, fixed_dir = rehearsal
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "vs fixed-size run: MATCHED" in done.stdout and "consumed sample ids and completions identical" in done.stdout
    assert {r["world_size"] for r in records(run_dir) if "reward" in r} == {1, 2, 3}
    fixed = trajectories_by_step(fixed_dir)
    assert trajectories_by_step(run_dir) == fixed and sorted(fixed) == list(range(1, 31))
    for attempt in records(run_dir, "samples.jsonl"):
        assert sorted(map(json.dumps, attempt["completions"])) == fixed[attempt["step"]]
    # a trajectory is the model's turns and the tool's replies: its loss mask has both
    masks = [mask for step in records(fixed_dir, "samples.jsonl") for _, _, _, mask in step["completions"]]
    assert any(0 in mask and 1 in mask for mask in masks)


def test_the_tiny_agent_learns_to_use_its_tool_and_says_what_it_did(rehearsal, capsys):
    """The fixed-size run: the mean reward of the last ten steps is at least twice the first ten's
    (docs/agents.md says so); every step logs the agent's metrics; its samples show the turns."""
    from elastic_launcher.cli import main

    _, _, run_dir = rehearsal
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
    done = rehearse(tmp_path, "[{step:0,nodes:2},{step:3,nodes:1},{step:6,nodes:2}]",
                    "recipes.elastic_policy.in_place=true", f"local.agent_python={image_python}",
                    "recipes.training_config.training_args.max_steps=10")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "rehearsal_report.json").read_text())
    assert [(t["from_nodes"], t["to_nodes"], t["restart"]) for t in report["transitions"]] == [(2, 1, "in place"),
                                                                                               (1, 2, "in place")]
    assert report["matched"] is True and "consumed sample ids and completions identical" in done.stdout
    assert trajectories_by_step(run_dir) == trajectories_by_step(run_dir / "fixed")
    assert wait_for(lambda: not own_processes(tmp_path), timeout=30), "agents, workers or reward processes left"
