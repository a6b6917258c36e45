"""Training throughput of the trainer against a minimal hand-written FSDP2 loop (bench/minimal_fsdp_loop.py)
on the same model and data, both under torchrun on this machine, measured in the same run.
Goal: the trainer keeps >= 0.95 of the minimal loop's tokens/s.

    python bench/train_throughput.py [--nproc 2] [--steps 40]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local import LocalJob  # noqa: E402

MODEL = ["recipes.training_config.model_config.architecture.hidden_size=256",
         "recipes.training_config.model_config.architecture.intermediate_size=688",
         "recipes.training_config.model_config.architecture.num_attention_heads=8",
         "recipes.training_config.model_config.architecture.num_key_value_heads=4",
         "recipes.training_config.datasets.max_len=128", "recipes.training_config.checkpoint.save_steps=100000",
         "recipes.scale_config={}",  # one batch setting for every size: 16 samples, micro-batch 8
         "recipes.training_config.training_args.train_batch_size=16",
         "recipes.training_config.training_args.micro_train_batch_size=8"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        assert launcher(["recipes=llama/tiny_llama_sft", *MODEL, f"recipes.trainer.num_nodes={args.nproc}",
                         f"recipes.training_config.training_args.max_steps={args.steps}",
                         f"output_dir={tmp / 'out'}"]) == 0
        configs = tmp / "out" / "tiny-llama-sft" / "configs"
        job = LocalJob(configs, tmp / "run", nproc_per_node=1)
        subprocess.run(job.command(args.nproc), env=job.env(args.nproc), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        steps = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in steps if "loss" in r]
        ours = sum(r["tokens"] for r in steps[5:]) / (steps[-1]["time"] - steps[4]["time"])
        (dataset_dir,) = [p for p in (tmp / "run" / "data_cache").iterdir() if p.is_dir()]
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={args.nproc}", str(ROOT / "bench" / "minimal_fsdp_loop.py"),
                              str(configs / f"config-n{args.nproc}.yaml"), str(dataset_dir), str(args.steps)],
                             env=job.env(args.nproc), check=True, capture_output=True, text=True).stdout
        baseline = float(out.split("TOKENS_PER_S")[1].split()[0])
    print(f"trainer: {ours:,.0f} tokens/s   minimal FSDP2 loop: {baseline:,.0f} tokens/s   "
          f"ratio {ours / baseline:.3f} (goal >= 0.95), {args.nproc} CPU processes, {args.steps} steps")


if __name__ == "__main__":
    main()
