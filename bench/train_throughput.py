"""Training throughput of the trainer against a minimal hand-written FSDP2 loop (bench/minimal_fsdp_loop.py)
on the same model and data, both under torchrun on this machine, measured in the same run.
Goal: the trainer keeps >= 0.95 of the minimal loop's tokens/s.

    python bench/train_throughput.py [--nproc 2] [--steps 40]
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402
from training.data import SPLITS  # noqa: E402

MODEL = ["recipes.training_config.model_config.architecture.hidden_size=256",
         "recipes.training_config.model_config.architecture.intermediate_size=688",
         "recipes.training_config.model_config.architecture.num_attention_heads=8",
         "recipes.training_config.model_config.architecture.num_key_value_heads=4",
         "recipes.training_config.datasets.max_len=128", "recipes.training_config.checkpoint.save_steps=100000"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5, help="alternating pairs of runs; the median ratio counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        batch = f"recipes.scale_config.n{args.nproc}.training_config.training_args"
        assert launcher(["recipes=llama/tiny_llama_sft", *MODEL, f"recipes.trainer.num_nodes={args.nproc}",
                         f"{batch}.train_batch_size=16", f"{batch}.micro_train_batch_size=8",
                         f"recipes.training_config.training_args.max_steps={args.steps}",
                         f"output_dir={tmp / 'out'}"]) == 0
        configs = tmp / "out" / "tiny-llama-sft" / "configs"
        pairs = []
        for i in range(args.repeats):  # alternate, so drifting machine load hits both alike
            job = LocalJob(configs, tmp / f"run{i}", nproc_per_node=1)
            subprocess.run(job.command(args.nproc), env=job.env(args.nproc), check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            steps = read_records(job.run_dir)
            steps = [r for r in steps if "loss" in r]
            ours = sum(r["tokens"] for r in steps[5:]) / (steps[-1]["time"] - steps[4]["time"])
            (dataset_dir,) = [p for p in (job.run_dir / "data_cache").iterdir() if p.is_dir()]
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   f"--nproc-per-node={args.nproc}", str(ROOT / "bench" / "minimal_fsdp_loop.py"),
                                   str(configs / f"config-n{args.nproc}.yaml"), str(dataset_dir / SPLITS[0]), str(args.steps)],
                                  env=job.env(args.nproc), capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"minimal loop failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
            out = done.stdout
            pairs.append((ours, float(out.split("TOKENS_PER_S")[1].split()[0])))
    pairs.sort(key=lambda pair: pair[0] / pair[1])
    ours, baseline = pairs[len(pairs) // 2]
    ratios = [o / b for o, b in pairs]
    print(f"trainer: {ours:,.0f} tokens/s   minimal FSDP2 loop: {baseline:,.0f} tokens/s   median ratio "
          f"{ours / baseline:.3f} of {', '.join(f'{r:.3f}' for r in ratios)} (goal >= 0.95), {args.nproc} CPU "
          f"processes, {args.steps} steps")


if __name__ == "__main__":
    main()
