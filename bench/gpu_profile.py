"""Where a training step's GPU time goes: the trainer's step against the per-layer-compiled minimal
FSDP2 loop's (bench/minimal_compiled_loop.py), same shape, one GPU, by kernel category.

    python bench/gpu_profile.py [--shape llama_1b] [--steps 2] [--out kernels.json]
    python bench/gpu_profile.py --cpu     # the small shape on CPU (top-level ops): checks the bench

Each side runs in a process of its own: a few warm steps, then `--steps` steps timed without the
profiler and as many under it (kernels only, so launches are not slowed by the profiler's CPU side).
A kernel's category comes from its name: attention (flash, cuDNN, flex's inductor templates),
matmul (cuBLAS, CUTLASS), loss (softmax/cross-entropy kernels; the LM head's matmul counts as
matmul), communication (NCCL), optimizer, other (elementwise, norms, copies); idle is the steps'
wall time no kernel covers. --out keeps each side's 40 longest kernels with their categories.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, scratch  # noqa: E402
from bench.gpu_throughput import SHAPES, render, synthetic_chats  # noqa: E402
from elastic_launcher.local.hyperpod_agents import free_port  # noqa: E402

WARM_STEPS = 3
CATEGORIES = [  # first match wins: attention's softmax is attention's, flex's templates are attention
    ("communication", r"nccl|all_gather|reduce_scatter|allreduce"),
    ("attention", r"flash|fmha|attention|attn|triton_tem|scaled_dot_product|cudnn.*sdpa|cudnn::fusion"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|matmul|wgmma|aten::mm|aten::addmm|aten::bmm|aten::linear"),
    ("loss", r"cross_entropy|log_softmax|logsumexp|nll_loss|softmax"),
    ("optimizer", r"adam|multi_tensor_apply|fusedoptimizer"),  # foreach kernels, FSDP's copies too
]


def category(name: str) -> str:
    lowered = name.lower()
    return next((c for c, pattern in CATEGORIES if re.search(pattern, lowered)), "other")


def covered_us(spans: list[tuple[float, float]]) -> float:
    """Microseconds covered by at least one span (kernels on several streams overlap)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def profiled(step, steps: int, on_gpu: bool) -> dict:
    """Seconds per step unprofiled, then each category's share of the profiled steps' wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    for _ in range(WARM_STEPS):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    step_s = (time.perf_counter() - start) / steps
    with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall_us = (time.perf_counter() - start) * 1e6
    wanted = torch.autograd.DeviceType.CUDA if on_gpu else torch.autograd.DeviceType.CPU
    kernels = [e for e in prof.events() if e.device_type == wanted and (on_gpu or e.cpu_parent is None)]
    spans = [(e.time_range.start, e.time_range.end) for e in kernels]
    wall_us = max(wall_us, max(b for _, b in spans) - min(a for a, _ in spans))
    shares, by_name = defaultdict(float), defaultdict(float)  # share of the wall time; microseconds
    for e, (a, b) in zip(kernels, spans):
        shares[category(e.name)] += (b - a) / wall_us
        by_name[e.name] += b - a
    shares["idle"] = 1 - covered_us(spans) / wall_us
    top = [(name, us / 1e3 / steps) for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:40]]
    return {"step_s": step_s, "shares": dict(shares),
            "kernels": [{"name": n[:160], "category": category(n), "ms_per_step": ms} for n, ms in top]}


def trainer_side(configs: Path, run_dir: Path, steps: int) -> dict:
    import torch

    from training.runtime.arguments import parse_args
    from training.runtime.elastic import ElasticStop
    from training.runtime.process import Process
    from training.trainer import Trainer

    trainer = Trainer(Process(parse_args(["--config-dir", str(configs), "--run-dir", str(run_dir)]), ElasticStop()))
    loader = trainer._loader()
    trainer.model.train()
    tokens = []

    def step():
        record = trainer.train_step([next(loader) for _ in range(trainer.plan.grad_accum_steps)])[0]
        tokens.append(record["tokens"])

    result = profiled(step, steps, torch.cuda.is_available())
    return result | {"tokens_per_step": sum(tokens) / len(tokens)}


def loop_side(configs: Path, steps: int) -> dict:
    import torch

    from bench.minimal_compiled_loop import build

    loop = build(str(configs / "config-n1.yaml"))
    return profiled(loop.step, steps, torch.cuda.is_available()) | {"tokens_per_step": loop.tokens_per_step}


def run_side(side: str, configs: Path, run_dir: Path, steps: int) -> dict:
    """One side in a fresh process with a process group of one."""
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    done = subprocess.run([sys.executable, __file__, "--side", side, "--configs", str(configs), "--run-dir", str(run_dir),
                           "--steps", str(steps)], env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        sys.exit(f"the {side} side failed:\n{done.stdout[-2000:]}{done.stderr[-6000:]}")
    return json.loads(done.stdout.split("RESULT ")[1].splitlines()[0])


def table(shape: str, sides: dict[str, dict]) -> str:
    names = ["attention", "matmul", "loss", "communication", "optimizer", "other", "idle"]
    lines = [f"{shape}: share of a step's wall time by kernel category (profiled steps)",
             "| side | s/step | real tokens/s | " + " | ".join(names) + " |", "|---" * (len(names) + 3) + "|"]
    for side, r in sides.items():
        shares = " | ".join(f"{r['shares'].get(n, 0.0):.1%} ({r['shares'].get(n, 0.0) * r['step_s']:.3f} s)" for n in names)
        lines.append(f"| {side} | {r['step_s']:.3f} | {r['tokens_per_step'] / r['step_s']:,.0f} | {shares} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="llama_1b")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="the small shape on CPU")
    parser.add_argument("--out", help="JSON of each side's longest kernels")
    parser.add_argument("--side", choices=["trainer", "loop"], help=argparse.SUPPRESS)
    parser.add_argument("--configs", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        configs = Path(args.configs)
        found = trainer_side(configs, Path(args.run_dir), args.steps) if args.side == "trainer" \
            else loop_side(configs, args.steps)
        print("RESULT " + json.dumps(found), flush=True)
        os._exit(0)  # skip the interpreter's teardown of the process group's threads
    import torch

    if not args.cpu and not torch.cuda.is_available():
        sys.exit("error: no GPU here: run bench/gpu_profile.py on a GPU node (or --cpu to check the bench itself)")
    shape = "smoke" if args.cpu else args.shape
    with scratch() as tmp:
        tmp = Path(tmp)
        synthetic_chats(data := tmp / "chats.jsonl", rows=400 if args.cpu else 2000, max_words=SHAPES[shape][2] // 2)
        configs = render(tmp, shape, 1, 1000, data)
        sides = {"trainer": run_side("trainer", configs, tmp / "run", args.steps),
                 "minimal FSDP2 loop, per-layer compile": run_side("loop", configs, tmp / "loop", args.steps)}
    print(table(shape, sides), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({side: r["kernels"] for side, r in sides.items()}, indent=1))


if __name__ == "__main__":
    main()
