"""An agent through the trainer (recipes/llama/tiny_llama_agent.yaml): multi-turn rollouts with a tool,
from its SFT warm start. Rehearsed in place under the real agents through every resize direction and a
node killed, at 2, 3, 1 and 2 nodes, with its rollouts drawn three steps behind by processes of their
own, its trajectories (the model's turns and the tool's replies) are the fixed-size run's token for
token at every step, and its final weights bit for bit (fp64 master weights); as shipped it learns to
use its tool; the metrics and samples say what the agent did."""

import json
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, completions_by_step, own_processes, records, step_records, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("test_agents")]
RECIPE = "llama/tiny_llama_agent"


# 2 -> 3 nodes (two workers stay, one joins), 3 -> 1, 1 -> 2, each in place, then a node killed two steps
# after the last resize's checkpoint (resumed from the peer copies: at most step 7 drawn again), and the
# last step after the restart.
# The trainer waits at each event's step until it is applied (a grow: until the joining pod's workers
# wait at the barrier).
TRACE = "[{step:0,nodes:2},{step:2,nodes:3},{step:4,nodes:1},{step:5,nodes:2},{step:7,kill:true}]"
STEPS = 8
PROMPTS = 4  # a step's prompts: 4 groups of 8 trajectories, split 2/1/1 at 3 ranks
# The global batch at every size (scale_configs/tiny_cpu.yaml names 8, and spells out 3 nodes' split of 8)
FOUR_PROMPTS = [f"recipes.training_config.training_args.train_batch_size={PROMPTS}",
                *(f"recipes.scale_config.n{n}.training_config.training_args.train_batch_size={PROMPTS}" for n in range(1, 5)),
                "~recipes.scale_config.n3.training_config.training_args.uneven_batch"]


# The vendor's asynchronous agents (async_config.max_steps_off_policy: 3), on ranks of their own: each
# node's one training process beside one rollout process that draws up to 3 steps ahead.
BEHIND_ON_RANKS_OF_THEIR_OWN = ["+recipes.training_config.training_args.method_args.max_steps_off_policy=3",
                                "+recipes.training_config.training_args.method_args.rollout_ranks_per_node=1",
                                "recipes.trainer.nproc_per_node=2"]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, image_python):
    """The recipe, 8 steps of 4 prompts drawn 3 steps behind by rollout processes of their own,
    rehearsed in place under the HyperPod agents through TRACE, then its fixed-size run."""
    tmp = tmp_path_factory.mktemp("agent_rehearsal")
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}",
                           "recipes.elastic_policy.is_elastic=true", "recipes.elastic_policy.in_place=true",
                           "action=rehearse", f"local.trace={TRACE}",
                           f"recipes.training_config.training_args.max_steps={STEPS}",
                           *FOUR_PROMPTS, *BEHIND_ON_RANKS_OF_THEIR_OWN,
                           f"local.agent_python={image_python}", f"local.run_dir={tmp / 'run'}",
                           "local.timeout=1000", f"output_dir={tmp / 'out'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, tmp


@pytest.fixture(scope="module")
def as_shipped(tmp_path_factory):
    """The recipe as shipped (30 steps of 8 prompts) at 2 nodes."""
    run_dir = tmp_path_factory.mktemp("agent_as_shipped") / "run"
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), f"recipes={RECIPE}", "action=local",
                           f"local.run_dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir


def hf_weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(run_dir / "hf" / "model.safetensors")


def test_an_agents_rehearsal_in_place_through_every_resize_is_the_fixed_size_run(rehearsal):
    """Every resize in place, the node failure by a process restart: the same trajectories at every
    step, each drawn by the policy after step max(0, t-4), whichever of 1, 2 and 3 nodes' rollout
    processes drew them (started again with every size; also those drawn again after the failure), and
    at the end the same weights, bit for bit: fp64 master weights sum a step's micro-batch gradients
    exactly in any order, and each micro-batch holds one prompt's group at every size. No agent or
    worker is left."""
    import torch

    done, tmp = rehearsal
    run_dir, fixed_dir = tmp / "run", tmp / "run" / "fixed"
    report = json.loads((run_dir / "rehearsal_report.json").read_text())
    resizes = [(t["from_nodes"], t["to_nodes"], t["restart"]) for t in report["transitions"] if t["cause"] == "resize"]
    assert resizes == [(2, 3, "in place"), (3, 1, "in place"), (1, 2, "in place")]
    assert "failure" in [t["cause"] for t in report["transitions"]]
    assert report["matched"] is True and "consumed sample ids and completions identical" in done.stdout
    assert {r["world_size"] for r in records(run_dir) if "reward" in r} == {1, 2, 3}
    steps = step_records(run_dir)
    assert {t: r["policy_lag"] for t, r in steps.items()} == {t: min(t - 1, 3) for t in range(1, STEPS + 1)}
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"  # the run's curves, as a local run draws them
    fixed = completions_by_step(fixed_dir)
    assert completions_by_step(run_dir) == fixed and sorted(fixed) == list(range(1, STEPS + 1))
    assert all(len(step) == PROMPTS * 8 for step in fixed.values())  # every prompt's group
    masks = [json.loads(t)[3] for t in fixed[1]]
    assert any(0 in mask and 1 in mask for mask in masks)  # the tool's replies inside the model's turns
    audit = records(run_dir, "samples.jsonl")
    steps = [r["step"] for r in audit]
    failure = [r for r in records(run_dir) if r.get("event") == "resume"][-1]  # the kill after step 7
    assert failure["source"] == "peers" and failure["step"] >= 6  # at most the step whose copy was in flight redone
    assert sorted(s for s in set(steps) if steps.count(s) > 1) == list(range(failure["step"] + 1, 8))
    for attempt in audit:  # every attempt at a step, lost or committed
        assert sorted(map(json.dumps, attempt["completions"])) == fixed[attempt["step"]]
    resized, reference = hf_weights(run_dir), hf_weights(fixed_dir)
    assert all(torch.equal(resized[k], reference[k]) for k in reference)
    assert wait_for(lambda: not own_processes(tmp), timeout=30), "agents or workers left"


def test_the_tiny_agent_learns_to_use_its_tool_and_says_what_it_did(as_shipped, capsys):
    """As shipped: the mean reward of the last ten steps is at least twice the first ten's
    (docs/agents.md says so); every step logs the agent's metrics; its samples show the turns."""
    from elastic_launcher.cli import main

    run_dir = as_shipped
    steps = step_records(run_dir)
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
