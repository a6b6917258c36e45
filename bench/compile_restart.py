"""What a restart pays for per-layer compilation, with and without a warm inductor cache.

The trainer keeps inductor's cache in <run_dir>/inductor_cache (TORCHINDUCTOR_CACHE_DIR), on the
run's shared volume, so the relaunch after a resize finds the kernels the previous launch compiled.
This bench starts the same compiled run three times: without compilation, compiled with an empty
cache (a first start), and compiled with the cache the previous start left (a restart). Reported:
seconds from process start to the end of the first step, and the ratio warm / cold.

    python bench/compile_restart.py [--nproc 2] [--recipe llama/tiny_llama_sft]
    python bench/compile_restart.py --nproc 1 --shape llama_1b    # a bench/gpu_throughput.py shape, on GPUs
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_throughput import SHAPES, render, synthetic_chats  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402


def time_to_first_step(configs: Path, run_dir: Path, nodes: int, per_node: int, cache: Path | None) -> float:
    job = LocalJob(configs, run_dir, nproc_per_node=per_node)
    env = job.env(nodes) | ({"TORCHINDUCTOR_CACHE_DIR": str(cache)} if cache else {})
    subprocess.run(job.command(nodes), env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = read_records(run_dir)
    start = next(r for r in records if r.get("event") == "start")
    first = next(r for r in records if "loss" in r)
    return first["time"] - start["process_start"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--recipe", default="llama/tiny_llama_sft")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="a bench/gpu_throughput.py shape instead of a recipe")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        configs = {}
        if args.shape:  # one node of nproc GPUs, the shape's own data
            synthetic_chats(data := tmp / "chats.jsonl", rows=200, max_words=SHAPES[args.shape][2] // 2)
        for compiled in (False, True):
            out = tmp / f"out-{compiled}"
            compile_override = f"recipes.training_config.model_config.compile={str(compiled).lower()}"
            if args.shape:
                configs[compiled] = render(out, args.shape, args.nproc, 2, data, (compile_override,))
                continue
            assert launcher([f"recipes={args.recipe}", f"recipes.trainer.num_nodes={args.nproc}", compile_override,
                             "recipes.training_config.datasets.packing=true",
                             "recipes.training_config.training_args.max_steps=2", f"output_dir={out}"]) == 0
            configs[compiled] = next(out.iterdir()) / "configs"
        cache = tmp / "inductor_cache"
        shape = (1, args.nproc) if args.shape else (args.nproc, 1)  # (nodes, processes per node)
        eager = time_to_first_step(configs[False], tmp / "eager", *shape, None)
        cold = time_to_first_step(configs[True], tmp / "cold", *shape, cache)
        shutil.rmtree(tmp / "cold")  # a restart: new processes, only the cache carried over
        warm = time_to_first_step(configs[True], tmp / "warm", *shape, cache)
    print(f"{args.shape or args.recipe}, {args.nproc} processes: process start -> first step done: eager {eager:.1f} s, "
          f"compiled with an empty cache {cold:.1f} s, compiled with a warm cache {warm:.1f} s "
          f"(warm/cold {warm / cold:.2f}; compile overhead {cold - eager:.1f} s cold, {warm - eager:.1f} s warm)")


if __name__ == "__main__":
    main()
