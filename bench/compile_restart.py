"""What a restart pays for per-layer compilation, with and without a warm inductor cache.

The trainer keeps inductor's cache in <run_dir>/inductor_cache (TORCHINDUCTOR_CACHE_DIR), on the
run's shared volume, so the relaunch after a resize finds the kernels the previous launch compiled.
This bench starts the same compiled run three times: without compilation, compiled with an empty
cache (a first start), and compiled with the cache the previous start left (a restart). Reported:
seconds from process start to the end of the first step, and the ratio warm / cold.

    python bench/compile_restart.py [--nproc 2] [--recipe llama/tiny_llama_sft]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402


def time_to_first_step(configs: Path, run_dir: Path, nproc: int, cache: Path | None) -> float:
    job = LocalJob(configs, run_dir, nproc_per_node=1)
    env = job.env(nproc) | ({"TORCHINDUCTOR_CACHE_DIR": str(cache)} if cache else {})
    subprocess.run(job.command(nproc), env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = read_records(run_dir)
    start = next(r for r in records if r.get("event") == "start")
    first = next(r for r in records if "loss" in r)
    return first["time"] - start["process_start"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--recipe", default="llama/tiny_llama_sft")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        configs = {}
        for compiled in (False, True):
            out = tmp / f"out-{compiled}"
            assert launcher([f"recipes={args.recipe}", f"recipes.trainer.num_nodes={args.nproc}",
                             f"recipes.training_config.model_config.compile={str(compiled).lower()}",
                             "recipes.training_config.datasets.packing=true",
                             "recipes.training_config.training_args.max_steps=2", f"output_dir={out}"]) == 0
            configs[compiled] = next(out.iterdir()) / "configs"
        cache = tmp / "inductor_cache"
        eager = time_to_first_step(configs[False], tmp / "eager", args.nproc, None)
        cold = time_to_first_step(configs[True], tmp / "cold", args.nproc, cache)
        shutil.rmtree(tmp / "cold")  # a restart: new processes, only the cache carried over
        warm = time_to_first_step(configs[True], tmp / "warm", args.nproc, cache)
    print(f"{args.recipe}, {args.nproc} processes: process start -> first step done: eager {eager:.1f} s, "
          f"compiled with an empty cache {cold:.1f} s, compiled with a warm cache {warm:.1f} s "
          f"(warm/cold {warm / cold:.2f}; compile overhead {cold - eager:.1f} s cold, {warm - eager:.1f} s warm)")


if __name__ == "__main__":
    main()
