"""Steps per minute of asynchronous GRPO against today's, at the same process count, in one run.

    python bench/async_grpo.py                       # the tiny agent twin, tools answering after a fixed latency
    python bench/async_grpo.py --latency 0.5 --steps 10

The tiny agent twin (recipes/llama/tiny_llama_agent.yaml) on one local node of two processes, three ways:
s = 0 with both processes training and generating (today's run), then s = 1 and s = 3 with one process
training and one generating (`rollout_ranks_per_node=1`). Its tool answers after `--latency` seconds
(bench/slow_tools.py); by default the latency is set, from a first on-policy run without it, so that a
step's wait for the tools is about as long as its updates. Reported: the steady steps' median seconds,
steps per minute and their ratio to s = 0, and each role's bubble (the training ranks' wait for a batch,
`batch_wait_s`; the rollout process's wait for a request or its policy, `rollout_idle_s`). Goal: s = 3
at least 1.5x today's steps per minute where the tools wait as long as an update.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, scratch  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402

RECIPE = "llama/tiny_llama_agent"
WARM_UP_STEPS = 2
TA, METHOD = "recipes.training_config.training_args", "recipes.training_config.training_args.method_args"


def run(tmp: Path, name: str, args, behind: int, rollout_ranks: int, latency: float) -> list[dict]:
    """The steady steps' records of the twin with `behind` = s and `rollout_ranks` = k on one node of two processes."""
    batch = [f"{TA}.train_batch_size={args.prompts}",
             *(f"recipes.scale_config.n{n}.{TA[8:]}.train_batch_size={args.prompts}" for n in range(1, 5)),
             "~recipes.scale_config.n3.training_config.training_args.uneven_batch"]
    overrides = [f"recipes={RECIPE}", "recipes.elastic_policy.is_elastic=false", "recipes.trainer.num_nodes=1",
                 "recipes.trainer.nproc_per_node=2", f"{TA}.max_steps={args.steps}", *batch,
                 f"{METHOD}.environment={ROOT / 'bench' / 'slow_tools.py'}:SlowSecretNumbers",
                 f"+{METHOD}.max_steps_off_policy={behind}", f"+{METHOD}.rollout_ranks_per_node={rollout_ranks}",
                 "recipes.training_config.checkpoint.save_steps=100000", f"{TA}.save_hf_ckpt=false",
                 "cluster.node_local=false", f"output_dir={tmp / name}"]
    assert launcher(overrides) == 0, name
    configs = next((tmp / name).iterdir()) / "configs"
    job = LocalJob(configs, tmp / f"{name}_run", nproc_per_node=2 - rollout_ranks)
    env = {**job.env(1), "BENCH_TOOL_LATENCY_S": str(latency)}
    done = subprocess.run(job.command(1), env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stdout[-2000:]}{done.stderr[-5000:]}")
    return [r for r in read_records(tmp / f"{name}_run") if "step_time" in r][WARM_UP_STEPS:]


def median(steps: list[dict], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (8 trajectories each)")
    parser.add_argument("--latency", type=float, default=None,
                        help="seconds each tool call takes (default: a step's tool wait about its updates' seconds)")
    args = parser.parse_args()
    with scratch() as tmp:
        tmp = Path(tmp)
        latency = args.latency
        if latency is None:  # one on-policy run without latency: the updates' seconds and the tool calls per step
            probe = run(tmp, "probe", args, 0, 0, 0.0)
            update_s = median(probe, "step_time") - median(probe, "rollout_s") - median(probe, "reward_s")
            # a turn's calls run at once, so a step waits about one latency per turn with calls, per group
            turns = median(probe, "turns_mean")
            latency = update_s / max(1.0, args.prompts / 2 * max(turns - 1, 1.0))
        results = {label: run(tmp, f"behind{s}", args, s, k, latency)
                   for label, s, k in (("s=0 (today)", 0, 0), ("s=1", 1, 1), ("s=3", 3, 1))}
    today = 60 / median(results["s=0 (today)"], "step_time")
    print(f"asynchronous GRPO, the tiny agent twin, 1 node of 2 processes, {args.prompts} prompts x 8 trajectories, "
          f"tool latency {latency:.3f} s, median of {args.steps - WARM_UP_STEPS} steps, {datetime.date.today()}")
    print("| run | step s | steps/min | vs s=0 | tool wait s | training ranks waiting for a batch s | "
          "rollout process waiting s |\n|---|---|---|---|---|---|---|")
    for label, steps in results.items():
        per_minute = 60 / median(steps, "step_time")
        print(f"| {label} | {median(steps, 'step_time'):.2f} | {per_minute:.2f} | {per_minute / today:.2f}x | "
              f"{median(steps, 'environment_s'):.2f} | {median(steps, 'batch_wait_s'):.2f} | "
              f"{median(steps, 'rollout_idle_s'):.2f} |")


if __name__ == "__main__":
    main()
