"""How long a fresh worker takes from its process's start to its first step: the tiny SFT twin at one
node (`python -m training`, a world of one), its tokenized data cached by a warm-up start, as every
restart after a job's first finds it. Every (re)start of a job pays this in each of its processes,
and the suite pays it at every launch.

Reported: the median over `--starts` starts (after one warm-up) of the seconds from just before the
process is spawned to the end of step 1, split at the trainer's `start` record (everything imported,
the config read, the process group formed). Then a local job's
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


def fresh(run_dir: Path) -> None:
    """The run directory as a first start finds it, but for the tokenized data cache it keeps: no
    checkpoint, on the volume or in the emulated nodes' memory (a local launch's tier and peer copies)."""
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    shutil.rmtree(run_dir / "node-local", ignore_errors=True)
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)


def first_step_records(run_dir: Path, done: subprocess.CompletedProcess, what: str) -> list[dict]:
    """The records a start that stopped after step 1 wrote (a failed start ends the bench, saying so)."""
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return read_records(run_dir)


def start_once(configs: Path, run_dir: Path, *python_flags: str) -> tuple[float, float, str]:
    """One start without a checkpoint (the data cache kept): (seconds to the `start` record, seconds to
    step 1's end, stderr)."""
    fresh(run_dir)
    spawned = time.time()
    done = subprocess.run([sys.executable, *python_flags, "-m", "training", "--config-dir", str(configs),
                           "--run-dir", str(run_dir), "--stop-at-step", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    records = first_step_records(run_dir, done, "the worker")
    start = next(r for r in records if r.get("event") == "start")
    step = next(r for r in records if r.get("step") == 1 and "loss" in r)
    return start["time"] - spawned, step["time"] - spawned, done.stderr


def launch_once(module: str, configs: Path, run_dir: Path, ranks: int) -> tuple[float, float]:
    """A local job of `ranks` ranks started by `python -m <module>` (torch.distributed.run or
    training.launch) and stopped after step 1, its data cached: (seconds from the spawn to step 1's
    end, CPU-seconds of all its processes)."""
    fresh(run_dir)
    job = LocalJob(configs, run_dir, nproc_per_node=1, launcher=module)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawned = time.time()
    done = subprocess.run(job.command(ranks, stop_at_step=1), cwd=ROOT, env=job.env(ranks), capture_output=True,
                          text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    step = next(r for r in first_step_records(run_dir, done, "the launch") if r.get("step") == 1 and "loss" in r)
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
        starts = [start_once(configs, run_dir) for _ in range(args.starts)]
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
