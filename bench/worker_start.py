"""How long a fresh worker takes from its process's start to its first step: the tiny SFT twin at one
node (`python -m training`, a world of one), its tokenized data cached by a warm-up start, as every
restart after a job's first finds it. Every (re)start of a job pays this in each of its processes,
and the suite pays it at every launch.

Reported: the median over `--starts` starts (after one warm-up) of the seconds from just before the
process is spawned to the end of step 1, split at the trainer's `start` record (everything imported,
the config read, the process group formed); against the floor measured in the same run, a bare process
that imports only what any such start must (torch with FSDP2 and DCP, transformers' Llama modeling
code) and exits, so that the ratio and the seconds above it are the trainer's own. Then a local job's
launch at `--ranks` ranks, torchrun's (each worker an interpreter of its own) against
`training.launch`'s (the workers forked from its agent once it has imported what they import), both
in the same run: the seconds from the spawn to step 1's end and the CPU-seconds of every process of
the launch (the suite and a node's restarts pay the latter). Last, the import profile of one more
start under
`python -X importtime`: the slowest top-level imports (cumulative) and any module of those a start
on cached data must not import (tests/test_worker_imports.py holds the list).

    python bench/worker_start.py [--starts 7] [--ranks 2] [--top 15]
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, scratch  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402


# What a start on cached data must not import: the data libraries (the cache is read with pyarrow), the
# launcher's, tracking's, RL's and S3's, and the compiler proper (inductor's code generation; dynamo
# itself comes with transformers' masking code). boto3 is not listed: accelerate, which transformers'
# modeling code imports where it is installed, imports it where installed; the trainer's own code
# reaches boto3 only through an S3 or Bedrock setting.
NOT_AT_START = ("datasets", "pandas", "multiprocess", "xxhash", "mlflow", "matplotlib", "tensorboard", "peft",
                "vllm", "openai", "math_verify", "s3torchconnector", "kubernetes", "hydra", "omegaconf",
                "elastic_launcher", "sklearn", "aiohttp", "requests", "torch._inductor.compile_fx")


def render(out: Path) -> Path:
    code = launcher(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true",
                     "recipes.training_config.training_args.max_steps=2", f"output_dir={out}"])
    assert code == 0, "the launcher refused the tiny SFT twin"
    return next(out.iterdir()) / "configs"


def start_once(configs: Path, run_dir: Path, *python_flags: str) -> tuple[float, float, str]:
    """One start without a checkpoint (the data cache kept): (seconds to the `start` record, seconds to
    step 1's end, stderr)."""
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    spawned = time.time()
    done = subprocess.run([sys.executable, *python_flags, "-m", "training", "--config-dir", str(configs),
                           "--run-dir", str(run_dir), "--stop-at-step", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"the worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    records = read_records(run_dir)
    start = next(r for r in records if r.get("event") == "start")
    step = next(r for r in records if r.get("step") == 1 and "loss" in r)
    return start["time"] - spawned, step["time"] - spawned, done.stderr


# What every start imports whatever the trainer does: torch with DTensor (FSDP2) and DCP, and the
# model's transformers modeling code (which itself imports torch._dynamo and the hub's client).
FLOOR_IMPORTS = ("import torch, torch.distributed.checkpoint, torch.distributed.fsdp; "
                 "import transformers.models.llama.modeling_llama")


def floor_once() -> float:
    """Seconds from spawning a bare process that imports FLOOR_IMPORTS to its exit."""
    spawned = time.time()
    subprocess.run([sys.executable, "-c", FLOOR_IMPORTS], cwd=ROOT, check=True, timeout=300)
    return time.time() - spawned


def launch_once(module: str, configs: Path, run_dir: Path, ranks: int) -> tuple[float, float]:
    """A local job of `ranks` ranks started by `python -m <module>` (torch.distributed.run or
    training.launch) and stopped after step 1, its data cached: (seconds from the spawn to step 1's
    end, CPU-seconds of all its processes)."""
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    job = LocalJob(configs, run_dir, nproc_per_node=1)
    command = [sys.executable, "-m", module, *job.command(ranks, stop_at_step=1)[3:]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawned = time.time()
    done = subprocess.run(command, cwd=ROOT, env=job.env(ranks), capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"the launch failed ({done.returncode}):\n{done.stderr[-3000:]}")
    step = next(r for r in read_records(run_dir) if r.get("step") == 1 and "loss" in r)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return step["time"] - spawned, cpu


def import_profile(stderr: str) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of each import `python -X importtime` reported."""
    rows = re.findall(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", stderr)
    return [(int(cumulative) / 1e6, " " * ((len(indent) - 1) // 2) + name) for cumulative, indent, name in rows]


def listed_under(module: str) -> str | None:
    """The entry of NOT_AT_START that `module` is or sits beneath, if any."""
    return next((n for n in NOT_AT_START if module == n or module.startswith(n + ".")), None)


def forbidden(modules: set[str]) -> list[str]:
    """The modules of NOT_AT_START (or beneath one) among `modules`."""
    return sorted(m for m in modules if listed_under(m))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--ranks", type=int, default=2, help="the ranks of the launch compared")
    parser.add_argument("--top", type=int, default=15, help="how many of the slowest imports to list")
    args = parser.parse_args()
    with scratch() as tmp:
        configs, run_dir = render(Path(tmp) / "out"), Path(tmp) / "run"
        start_once(configs, run_dir)  # the warm-up: tokenizes the data into the run's cache
        starts, floors = [], []
        for _ in range(args.starts):  # interleaved, so that a busy spell weighs on both alike
            starts.append(start_once(configs, run_dir))
            floors.append(floor_once())
        launches = {"torch.distributed.run": [], "training.launch": []}
        for _ in range(args.starts):
            for module, found in launches.items():
                found.append(launch_once(module, configs, run_dir, args.ranks))
        *_, stderr = start_once(configs, run_dir, "-X", "importtime")
    to_start = statistics.median(s for s, _, _ in starts)
    to_step = statistics.median(s for _, s, _ in starts)
    print(f"worker start, tiny SFT twin at one node, data cached: {to_step:.2f} s to step 1's end "
          f"(median of {args.starts}; min {min(s for _, s, _ in starts):.2f}, max {max(s for _, s, _ in starts):.2f}), "
          f"{to_start:.2f} s of it to the trainer's start record")
    floor = statistics.median(floors)
    print(f"the floor, a bare process importing torch (FSDP2, DCP) and transformers' Llama modeling code: {floor:.2f} s "
          f"(median of {args.starts}); the start {to_step / floor:.2f}x it, {to_step - floor:.2f} s the trainer's own")
    medians = {module: (statistics.median(w for w, _ in found), statistics.median(c for _, c in found))
               for module, found in launches.items()}
    (run_wall, run_cpu), (fork_wall, fork_cpu) = medians["torch.distributed.run"], medians["training.launch"]
    print(f"a launch at {args.ranks} ranks to step 1's end (median of {args.starts}): torchrun {run_wall:.2f} s and "
          f"{run_cpu:.1f} CPU-s; training.launch {fork_wall:.2f} s ({fork_wall / run_wall:.2f}x) and {fork_cpu:.1f} "
          f"CPU-s ({fork_cpu / run_cpu:.2f}x)")
    profile = import_profile(stderr)
    modules = {name.strip() for _, name in profile}
    print(f"imports: {len(modules)} modules; the slowest, cumulative (python -X importtime):")
    for seconds, name in sorted((row for row in profile if not row[1].startswith(" ")), reverse=True)[:args.top]:
        print(f"  {seconds:6.3f} s  {name}")
    imported = sorted({listed_under(m) for m in forbidden(modules)})
    print("of what a start on cached data must not import: " + (", ".join(imported) if imported else "none"))


if __name__ == "__main__":
    main()
