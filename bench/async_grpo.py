"""Steps per minute of asynchronous GRPO against today's, at the same process count, in one run.

    python bench/async_grpo.py                       # the tiny agent twin, tools answering after a fixed latency
    python bench/async_grpo.py --twin judge          # the tiny RLAIF twin, its loopback judge answering likewise
    python bench/async_grpo.py --latency 0.5 --steps 10

A tiny twin on one local node of two processes, three ways: s = 0 with both processes training and
generating (today's run), then s = 1 and s = 3 with one process training and one generating
(`rollout_ranks_per_node=1`). The agent twin (recipes/llama/tiny_llama_agent.yaml): its tool answers
after `--latency` seconds (bench/slow_tools.py). The judge twin (recipes/llama/tiny_llama_grpo_rlaif.yaml):
scripts/judge_server.py on loopback answers each verdict after `--latency` seconds. By default the
latency is set, from a first on-policy run without it, so that a step's wait for the tools or the
judge is about as long as its updates. Reported: the steady steps' median seconds, steps per minute
and their ratio to s = 0, the step's wait for the service, and each role's bubble (the training
ranks' wait for a batch, `batch_wait_s`; the rollout process's wait for a request or its policy,
`rollout_idle_s`). Goal: s = 3 at least 1.5x today's steps per minute where the service waits as
long as an update.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, scratch  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from judge_server import Fault, JudgeServer  # noqa: E402

WARM_UP_STEPS = 2
TA, METHOD = "recipes.training_config.training_args", "recipes.training_config.training_args.method_args"
RECIPES = {"agent": "llama/tiny_llama_agent", "judge": "llama/tiny_llama_grpo_rlaif"}
WAITED = {"agent": "environment_s", "judge": "judge_wait_s"}  # a step's wait for its service


def service(twin: str, args, latency: float, judge_url: str) -> tuple[list[str], dict]:
    """The overrides and environment that make the twin's service answer after `latency` seconds."""
    if twin == "judge":  # the loopback judge's every reply is delayed (main fills its faults)
        return [f"{METHOD}.judge.base_url={judge_url}/v1"], {}
    batch = [f"{TA}.train_batch_size={args.prompts}",
             *(f"recipes.scale_config.n{n}.{TA[8:]}.train_batch_size={args.prompts}" for n in range(1, 5)),
             "~recipes.scale_config.n3.training_config.training_args.uneven_batch"]
    return [*batch, f"{METHOD}.environment={ROOT / 'bench' / 'slow_tools.py'}:SlowSecretNumbers"], \
        {"BENCH_TOOL_LATENCY_S": str(latency)}


def run(tmp: Path, name: str, args, behind: int, rollout_ranks: int, latency: float, judge_url: str = "") -> list[dict]:
    """The steady steps' records of the twin with `behind` = s and `rollout_ranks` = k on one node of two processes."""
    own, env = service(args.twin, args, latency, judge_url)
    overrides = [f"recipes={RECIPES[args.twin]}", "recipes.elastic_policy.is_elastic=false", "recipes.trainer.num_nodes=1",
                 "recipes.trainer.nproc_per_node=2", f"{TA}.max_steps={args.steps}", *own,
                 f"+{METHOD}.max_steps_off_policy={behind}", f"+{METHOD}.rollout_ranks_per_node={rollout_ranks}",
                 "recipes.training_config.checkpoint.save_steps=100000", f"{TA}.save_hf_ckpt=false",
                 "cluster.node_local=false", f"output_dir={tmp / name}"]
    assert launcher(overrides) == 0, name
    configs = next((tmp / name).iterdir()) / "configs"
    job = LocalJob(configs, tmp / f"{name}_run", nproc_per_node=2 - rollout_ranks)
    done = subprocess.run(job.command(1), env={**job.env(1), **env}, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stdout[-2000:]}{done.stderr[-5000:]}")
    return [r for r in read_records(tmp / f"{name}_run") if "step_time" in r][WARM_UP_STEPS:]


def median(steps: list[dict], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--twin", choices=sorted(RECIPES), default="agent")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=4, help="the agent twin's prompts per step (8 trajectories each)")
    parser.add_argument("--latency", type=float, default=None,
                        help="seconds each tool call or verdict takes (default: a step's wait about its updates' seconds)")
    args = parser.parse_args()
    with scratch() as tmp, JudgeServer() as judge:
        tmp = Path(tmp)
        latency = args.latency
        if latency is None:  # one on-policy run without latency: the updates' seconds and the calls per step
            probe = run(tmp, "probe", args, 0, 0, 0.0, judge.url)
            update_s = median(probe, "step_time") - median(probe, "rollout_s") - median(probe, "reward_s")
            if args.twin == "judge":  # its workers ask at once: a step waits one latency per round of them
                config = yaml.safe_load((next((tmp / "probe").iterdir()) / "configs" / "config-n1.yaml").read_text())
                workers = config["training_config"]["training_args"]["method_args"]["judge"]["max_workers"]
                latency = update_s / max(1.0, median(probe, "judge_calls") / workers)
            else:  # a turn's calls run at once, so a step waits about one latency per turn with calls (a
                # trajectory's turns less its last), per group of each process (the probe's trajectories are the runs')
                latency = update_s / max(1.0, args.prompts / 2 * max(median(probe, "turns_mean") - 1, 0.25))
        judge.faults.extend([Fault(delay=latency)] * 100_000)
        results = {label: run(tmp, f"behind{s}", args, s, k, latency, judge.url)
                   for label, s, k in (("s=0 (today)", 0, 0), ("s=1", 1, 1), ("s=3", 3, 1))}
    today = 60 / median(results["s=0 (today)"], "step_time")
    shape = f"{args.prompts} prompts x 8 trajectories, tool" if args.twin == "agent" else "8 prompts x 4 completions, judge"
    print(f"asynchronous GRPO, the tiny {args.twin} twin, 1 node of 2 processes, {shape} latency {latency:.3f} s, "
          f"median of {args.steps - WARM_UP_STEPS} steps, {datetime.date.today()}")
    print(f"| run | step s | steps/min | vs s=0 | {'tool' if args.twin == 'agent' else 'judge'} wait s | training ranks "
          "waiting for a batch s | rollout process waiting s |\n|---|---|---|---|---|---|---|")
    for label, steps in results.items():
        per_minute = 60 / median(steps, "step_time")
        print(f"| {label} | {median(steps, 'step_time'):.2f} | {per_minute:.2f} | {per_minute / today:.2f}x | "
              f"{median(steps, WAITED[args.twin]):.2f} | {median(steps, 'batch_wait_s'):.2f} | "
              f"{median(steps, 'rollout_idle_s'):.2f} |")


if __name__ == "__main__":
    main()
