"""One GRPO step's split and its limits, measured in one run.

    python bench/grpo_throughput.py                        # CPU: the tiny Llama, the trainer's own sampler
    python bench/grpo_throughput.py --engine vllm --model /models/Llama-3.2-1B-Instruct --nproc 8   # a GPU node

A GRPO step brings the policy's new weights to the sampler, samples every prompt's completions,
waits for the last rewards, scores the completions under the rollout's policy and the reference
(forwards without gradients, as verl's old_log_prob and ref) and takes its updates. The bench runs the trainer for `--steps` steps
(the first two left out: warm-up) and reports each part's seconds and tokens/s against its limit:
- the rollout against the sampler alone generating the same prompts with the same settings (vLLM
  alone, a fresh engine on one GPU, against the trainer's engines per GPU; on CPU the trainer's own
  sampler is the engine, so there is no other);
- the update against the trainer's SFT step over rows of the same shape (each prompt's completions,
  prompt + completion long, unpacked), tokens/s;
- the weight sync as a share of the step.
Goals (GPU): rollout >= 0.8x vLLM alone, weight sync < 5% of the step for a 1B-8B model, update >=
0.9x SFT's tokens/s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT  # noqa: E402
from bench.gpu_throughput import synthetic_chats  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402

WARM_UP_STEPS = 2
PROMPTS = "data/grpo_tiny.jsonl"  # the tiny GRPO recipe's prompts, sums to complete
TA, METHOD = "recipes.training_config.training_args", "recipes.training_config.training_args.method_args"


def vllm_overrides(model: str, nproc: int) -> list[str]:
    """The tiny GRPO recipe on one GPU node, sampling with vLLM from a save_pretrained model."""
    return [f"+{METHOD}.rollout_engine=vllm", "recipes.instance_type=ml.p5.48xlarge", "recipes.trainer.num_nodes=1",
            f"recipes.trainer.nproc_per_node={nproc}", "recipes.elastic_policy.is_elastic=false",
            f"recipes.training_config.model_config.model_name_or_path={model}",
            "recipes.training_config.model_config.tokenizer_name_or_path=null",
            "recipes.training_config.model_config.architecture=null",
            "recipes.training_config.model_config.mixed_precision=bf16"]


def grpo_overrides(args) -> list[str]:
    common = [f"{TA}.train_batch_size={args.prompts}", f"{TA}.micro_train_batch_size={args.micro}",
              f"{TA}.max_steps={args.steps}", f"{METHOD}.num_generations={args.n}",
              f"{METHOD}.max_new_tokens={args.max_new_tokens}", f"{METHOD}.max_prompt_length={args.max_prompt_length}",
              f"{METHOD}.mini_batches={args.mini_batches}",
              "recipes.training_config.checkpoint.save_steps=100000", "recipes.training_config.training_args.save_hf_ckpt=false",
              "cluster.node_local=false"]
    if args.engine == "trainer":  # the tiny Llama, one CPU process per local node
        return [*common, f"recipes.trainer.num_nodes={args.nproc}"]
    return [*common, *vllm_overrides(args.model, args.nproc)]


def render(tmp: Path, recipe: str, name: str, overrides: list[str]) -> Path:
    assert launcher([f"recipes={recipe}", *overrides, f"output_dir={tmp / name}"]) == 0, name
    return next((tmp / name).iterdir()) / "configs"


def train(configs: Path, run_dir: Path, args) -> list[dict]:
    """The steady steps' records."""
    nodes, per_node = (args.nproc, 1) if args.engine == "trainer" else (1, args.nproc)
    job = LocalJob(configs, run_dir, nproc_per_node=per_node)
    done = subprocess.run(job.command(nodes), env=job.env(nodes), capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"trainer failed:\n{done.stdout[-2000:]}{done.stderr[-5000:]}")
    return [r for r in read_records(run_dir) if "step_time" in r][WARM_UP_STEPS:]


def grpo_split(steps: list[dict], rows: int) -> dict:
    """Medians over the steady steps: seconds per part, tokens/s of the rollout and of the updates;
    the mean length of the updates' `rows` rows."""
    def median(key):
        return statistics.median(r[key] for r in steps)

    def updating(r):  # the updates alone: what is left of the step
        return r["step_time"] - r["rollout_s"] - r["reward_s"] - r["logprob_s"]

    return {"row_tokens": statistics.mean(r["tokens"] / rows for r in steps), "step_s": median("step_time"),
            "rollout_s": median("rollout_s"), "weight_sync_s": median("weight_sync_s"),
            "reward_s": median("reward_s"), "logprob_s": median("logprob_s"),
            "update_s": statistics.median(map(updating, steps)), "rollout_tokens_per_s": median("rollout_tokens_per_s"),
            "update_tokens_per_s": statistics.median(r["tokens"] / updating(r) for r in steps)}


def sft_limit(tmp: Path, args, length: int) -> float:
    """The trainer's SFT tokens/s over unpacked rows of `length` tokens (a GRPO row's mean: a prompt
    and its completion), as many rows a step and a micro-batch as the GRPO run's updates hold."""
    data = tmp / "chats.jsonl"
    synthetic_chats(data, rows=args.prompts * args.n * (args.steps + 1), max_words=4 * length)
    overrides = [o for o in grpo_overrides(args) if not o.lstrip("+").startswith(TA)]  # the model, the processes
    overrides += [f"{TA}.train_batch_size={args.prompts * args.n}", f"{TA}.micro_train_batch_size={args.micro * args.n}",
                  f"{TA}.max_steps={args.steps}", f"recipes.training_config.datasets.train_data={data}",
                  f"recipes.training_config.datasets.max_len={length}", "recipes.training_config.datasets.packing=false"]
    steps = train(render(tmp, "llama/tiny_llama_sft", "sft", overrides), tmp / "sft_run", args)
    return statistics.median(r["tokens_per_s"] for r in steps)


def vllm_alone(args) -> float:
    """Completion tokens/s of a fresh vLLM engine on one GPU completing a step's prompts (its own
    process: the trainer's engines are gone by then)."""
    done = subprocess.run([sys.executable, __file__, "--vllm-alone", "--model", args.model, "--prompts", str(args.prompts),
                           "--n", str(args.n), "--max-new-tokens", str(args.max_new_tokens)],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"vLLM alone failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.split("TOKENS_PER_S")[1].split()[0])


def _run_vllm_alone(args) -> None:
    """The first `--prompts` chats of the tiny GRPO recipe's data, through the model's chat template."""
    from vllm import LLM, SamplingParams

    chats = [json.loads(line)["prompt"] for line in (ROOT / PROMPTS).read_text().splitlines()[:args.prompts]]
    llm = LLM(model=args.model, dtype="bfloat16", seed=0)
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_new_tokens)
    llm.chat(chats[:2], params, use_tqdm=False)  # warm-up
    started = time.perf_counter()
    outputs = llm.chat(chats, params, use_tqdm=False)
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    print(f"TOKENS_PER_S {tokens / (time.perf_counter() - started)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["trainer", "vllm"], default="trainer")
    parser.add_argument("--model", help="a save_pretrained directory (--engine vllm)")
    parser.add_argument("--nproc", type=int, default=2, help="processes: CPU local nodes, or GPUs of one node")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--micro", type=int, default=2, help="prompts per micro-batch")
    parser.add_argument("--n", type=int, default=4, help="completions per prompt")
    parser.add_argument("--mini-batches", type=int, default=2, help="optimizer updates per step")
    parser.add_argument("--max-prompt-length", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--vllm-alone", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vllm_alone:
        return _run_vllm_alone(args)
    if args.engine == "vllm" and not args.model:
        sys.exit("--engine vllm needs --model <a save_pretrained directory>")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        configs = render(tmp, "llama/tiny_llama_grpo", "grpo", grpo_overrides(args))
        split = grpo_split(train(configs, tmp / "grpo_run", args), args.prompts * args.n)
        sft = sft_limit(tmp, args, round(split["row_tokens"]))
        alone = vllm_alone(args) if args.engine == "vllm" else None
    step = split["step_s"]
    # The step's rollout tokens/s counts every engine; vLLM alone runs on one GPU: per GPU against per GPU.
    per_gpu = split["rollout_tokens_per_s"] / args.nproc
    rollout_ratio = f"{per_gpu / alone:.2f}x vLLM alone on one GPU ({per_gpu:,.0f} per GPU against {alone:,.0f})" \
        if alone else "- (the trainer's sampler is the engine)"
    print(f"GRPO step, {args.engine} rollouts, {args.nproc} processes, {args.prompts} prompts x {args.n} completions "
          f"in {args.mini_batches} update(s) "
          f"(prompt <= {args.max_prompt_length}, completion <= {args.max_new_tokens} tokens), median of "
          f"{args.steps - WARM_UP_STEPS} steps, {datetime.date.today()}")
    print("| part | seconds | share of the step | tokens/s | against its limit |\n|---|---|---|---|---|")
    print(f"| rollout | {split['rollout_s']:.3f} | {split['rollout_s'] / step:.0%} | {split['rollout_tokens_per_s']:,.0f} "
          f"| {rollout_ratio} |")
    print(f"| of it, weight sync | {split['weight_sync_s']:.3f} | {split['weight_sync_s'] / step:.1%} | - | goal < 5% |")
    print(f"| reward wait | {split['reward_s']:.3f} | {split['reward_s'] / step:.0%} | - | - |")
    print(f"| log-probabilities | {split['logprob_s']:.3f} | {split['logprob_s'] / step:.0%} | - | - |")
    print(f"| updates | {split['update_s']:.3f} | {split['update_s'] / step:.0%} | {split['update_tokens_per_s']:,.0f} "
          f"| {split['update_tokens_per_s'] / sft:.2f}x SFT's step on as many rows of its mean length, "
          f"{split['row_tokens']:.0f} tokens ({sft:,.0f}) |")
    print(f"| step | {step:.3f} | 100% | - | - |")


if __name__ == "__main__":
    main()
