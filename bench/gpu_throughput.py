"""GPU throughput of the trainer against a per-layer-compiled minimal FSDP2 loop
(bench/minimal_compiled_loop.py), on the same model shape, in one run. Reports real (non-padding)
tokens/s, MFU (torchtitan's convention), peak memory and the packing fill of both.

Goals on one H100 (Llama-3.2-1B shape, vocab 128256, seq 4096, micro-batch 2, global batch 16, bf16):
trainer >= 1.0x the compiled loop's tokens/s, MFU >= 0.45, peak <= 32 GiB. A second table runs a
GPT-OSS-20B shape cut to two layers (seq 2048).

    python bench/gpu_throughput.py [--nproc 1] [--steps 30] [--shapes llama_1b,gpt_oss_20b_2l]
    python bench/gpu_throughput.py --smoke      # a small shape on CPU: checks the bench itself runs
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT  # noqa: E402
from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.local.run import LocalJob  # noqa: E402
from training.contract.records import read_records  # noqa: E402

SHAPES = {
    # (recipe whose tokenizer and data path are replaced, architecture, seq, extra overrides)
    "llama_1b": ("llama/tiny_llama_sft", dict(
        model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        tie_word_embeddings=True), 4096, ["recipes.training_config.model_config.attn_implementation=flex_attention"]),
    "gpt_oss_20b_2l": ("gpt_oss/tiny_gpt_oss_sft", dict(
        model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=2, num_attention_heads=64,
        num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4, vocab_size=201088,
        sliding_window=128, max_position_embeddings=131072), 2048,
        ["recipes.training_config.model_config.attn_implementation=flex_attention"]),
    # the newest families at their published layer widths, a few layers each (bench/gpu_smoke.py, check 8)
    "gemma4_e4b_6l": ("gemma/tiny_gemma4_sft", dict(
        model_type="gemma4_text", hidden_size=2560, intermediate_size=10240, num_hidden_layers=6,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256, global_head_dim=512, vocab_size=262144,
        hidden_size_per_layer_input=256, vocab_size_per_layer_input=262144, num_kv_shared_layers=2,
        layer_types=["sliding_attention", "full_attention"] * 3, sliding_window=512, final_logit_softcapping=30.0,
        tie_word_embeddings=True, max_position_embeddings=131072), 4096,
        ["recipes.training_config.model_config.attn_implementation=flex_attention"]),
    "qwen3_5_4b_4l": ("qwen/tiny_qwen3_5_sft", dict(
        model_type="qwen3_5_text", hidden_size=2560, intermediate_size=9216, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=4, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
        linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
        layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=True,
        max_position_embeddings=131072), 4096,  # sdpa: transformers has no flex attention for Qwen 3.5
        ["recipes.training_config.model_config.attn_implementation=sdpa",
         "recipes.training_config.datasets.packing=false"]),
    "nemotron3_nano_4l": ("nemotron/tiny_nemotron_h_sft", dict(
        model_type="nemotron_h", layers_block_type=["mamba", "moe", "attention", "moe"], hidden_size=2688,
        num_attention_heads=32, num_key_value_heads=2, head_dim=128, mamba_num_heads=64, mamba_head_dim=64,
        ssm_state_size=128, n_groups=8, chunk_size=128, n_routed_experts=128, num_experts_per_tok=6,
        moe_intermediate_size=1856, moe_shared_expert_intermediate_size=3712, n_group=1, topk_group=1,
        vocab_size=131072, intermediate_size=1856, max_position_embeddings=131072), 4096,
        ["recipes.training_config.model_config.attn_implementation=flex_attention",
         "recipes.training_config.datasets.packing=false"]),
    "smoke": ("llama/tiny_llama_sft", dict(
        model_type="llama", hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=4096, max_position_embeddings=1024, tie_word_embeddings=True), 256,
        ["recipes.training_config.model_config.compile=false"]),
}


def synthetic_chats(path: Path, rows: int, max_words: int, seed: int = 0) -> None:
    """Long multi-turn chats of random words, lengths spread from short to about one full row."""
    rng = random.Random(seed)
    words = [w for w in (ROOT / "data" / "sft_tiny.jsonl").read_text().split() if w.isalpha()] or ["token"]
    with open(path, "w") as f:
        for _ in range(rows):
            n = rng.randint(max_words // 10, max_words)
            turns = [{"role": role, "content": " ".join(rng.choices(words, k=max(1, n // 4)))}
                     for role in ("user", "assistant", "user", "assistant")]
            f.write(json.dumps({"messages": turns}) + "\n")


def render(tmp: Path, shape: str, nproc: int, steps: int, data: Path, overrides: tuple[str, ...] = ()) -> Path:
    recipe, arch, seq, extra = SHAPES[shape]
    arch_override = "{" + ",".join(f"{k}:{v}" for k, v in arch.items()) + "}"
    ta = "recipes.training_config.training_args"
    assert launcher([f"recipes={recipe}", f"++recipes.training_config.model_config.architecture={arch_override}",
                     "recipes.trainer.num_nodes=1", f"recipes.trainer.nproc_per_node={nproc}", f"recipes.training_config.datasets.max_len={seq}",
                     f"recipes.training_config.datasets.train_data={data}", "recipes.training_config.datasets.packing=true",
                     "recipes.training_config.model_config.mixed_precision=bf16", f"{ta}.train_batch_size=16",
                     f"{ta}.micro_train_batch_size=2", f"{ta}.max_steps={steps}", f"{ta}.warmup_steps=2",
                     "recipes.training_config.checkpoint.save_steps=100000", "cluster.node_local=false", *extra, *overrides,
                     f"output_dir={tmp / shape}"]) == 0
    return next((tmp / shape).iterdir()) / "configs"


def run_trainer(configs: Path, run_dir: Path, nproc: int, steady_after: int = 5) -> dict:
    job = LocalJob(configs, run_dir, nproc_per_node=nproc)
    done = subprocess.run(job.command(1), env=job.env(1), capture_output=True, text=True)
    if done.returncode:  # the trainer's `error:` line first: a compile error's trace outgrows any tail
        errors = "".join(line for line in done.stderr.splitlines(keepends=True) if line.startswith("error:"))
        sys.exit(f"trainer failed:\n{errors}{done.stdout[-2000:]}{done.stderr[-20000:]}")
    records = read_records(run_dir)
    steps = [r for r in records if "loss" in r][steady_after:]  # steady state: compilation and warm-up excluded
    data = next(r for r in records if r.get("event") == "data")
    return {"tokens_per_s": sum(r["tokens"] for r in steps[1:]) / max(1e-9, steps[-1]["time"] - steps[0]["time"]),
            "mfu": sum(r.get("mfu") or 0 for r in steps) / len(steps) or None,
            "peak_gib": max(r["peak_memory_gib"] for r in steps),
            "reserved_gib": max(r.get("peak_reserved_gib", r["peak_memory_gib"]) for r in steps),
            "fill": data.get("packing_fill"), "losses": [r["loss"] for r in records if "loss" in r]}


def run_baseline(configs: Path, nproc: int, steps: int, env: dict) -> dict:
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                           str(ROOT / "bench" / "minimal_compiled_loop.py"), str(configs / "config-n1.yaml"), str(steps)],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"minimal loop failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.split("RESULT ")[1].splitlines()[0])


def table(shape: str, ours: dict, baseline: dict) -> str:
    def row(name, r):
        mfu = f"{r['mfu']:.2f}" if r["mfu"] else "-"
        return f"| {name} | {r['tokens_per_s']:,.0f} | {mfu} | {r['peak_gib']:.1f} | {r['fill']:.2f} |"

    return "\n".join([f"{shape}: trainer / compiled loop = {ours['tokens_per_s'] / baseline['tokens_per_s']:.2f}x",
                      "| run | real tokens/s | MFU | peak GiB | row fill |", "|---|---|---|---|---|",
                      row("trainer", ours), row("minimal FSDP2 loop, per-layer compile", baseline)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=1, help="GPUs (one node)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--shapes", default="llama_1b,gpt_oss_20b_2l")
    parser.add_argument("--smoke", action="store_true", help="a small shape on CPU")
    args = parser.parse_args()
    shapes = ["smoke"] if args.smoke else args.shapes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for shape in shapes:
            data = tmp / f"chats-{shape}.jsonl"
            synthetic_chats(data, rows=400 if args.smoke else 2000, max_words=SHAPES[shape][2] // 2)
            configs = render(tmp, shape, args.nproc, args.steps, data)
            ours = run_trainer(configs, tmp / f"run-{shape}", args.nproc)
            baseline = run_baseline(configs, args.nproc, args.steps, LocalJob(configs, tmp, args.nproc).env(1))
            print(table(shape, ours, baseline), flush=True)


if __name__ == "__main__":
    main()
