"""The first GPU hour in one command: what only a GPU can show, in the order a failure is cheapest.

    python bench/gpu_smoke.py [--nproc 8]     # on a GPU node with the image's packages
                                              # (a node with CUDA's torch and no package index: bench/offline_packages.py)
    python bench/gpu_smoke.py --cpu           # the same parts that run on CPU, tiny shapes: checks the bench

1. the image's self-check (training.doctor: C compiler, Triton compiles, EFA/OFI, driver and CUDA);
2. one training step of a small Llama (flex attention, compiled layers, bf16);
3. Llama 4's experts as one grouped matmul, forward and backward, with groups of unaligned sizes (and
   an empty one) against the per-expert loop in fp32;
4. the trainer's fused LM-head loss against liger-kernel's (equal loss and gradients, step time);
5. one training step under `torch.cuda.set_sync_debug_mode("warn")`: host syncs before the update;
6. peak reserved memory of a step against the plan's figure (trace + allowance), FSDP and, with two
   or more GPUs, HSDP;
7. bench/gpu_throughput.py (the longest part; options this script does not know, such as
   `--steps 12 --shapes llama_1b`, are passed to it);
8. the newest families at their published layer widths (a few layers of Gemma 4 E4B, Qwen 3.5 4B and
   Nemotron 3 Nano) through the trainer, their layers compiled, and flex attention at Gemma 4's
   512-wide global heads against fp32 attention;
9. GRPO with vLLM rollouts (a small Llama saved as transformers writes it): two steps through the
   trainer with batch invariance off and on (the weight sync's share of the step, vLLM's
   log-probabilities against the trainer's, what invariance costs the updates); an engine's memory
   awake, asleep at level 2 and awake again under the pods' allocator settings (against the plan's
   1.5 GiB for a sleeping engine); a seeded rollout drawn one prompt at a time and four at once,
   with invariance on (the same tokens) and off; two engines one after the other in one process,
   the first shut down as an in-place resize does;
10. bench/gpu_profile.py: the trainer's step and the compiled loop's by kernel category (1B shape);
11. unpacked rows (one sample each, padded) through the 1B shape: the trainer's causal SDPA with no
    mask against SDPA with the padding mask;
12. bench/compile_restart.py on the 1B shape: process start to the first step, cold and warm cache.
A check that fails is a FAILED row and the next one runs; each row is also written to stderr as it ends.
It prints one table, with the device and the date, to paste into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from bench.common import ROOT  # noqa: E402
from bench.gpu_throughput import SHAPES, render, run_trainer, synthetic_chats  # noqa: E402

SHAPES["smoke_gpu"] = (SHAPES["smoke"][0], SHAPES["smoke"][1], 256,
                       ["recipes.training_config.model_config.attn_implementation=flex_attention"])


def self_check() -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-m", "training.doctor"], cwd=ROOT, capture_output=True, text=True)
    return ("ok" if done.returncode == 0 else "FAILED"), (done.stdout + done.stderr).strip().replace("\n", "; ")


def grouped_experts(device, experts=4, hidden=64, inner=96, counts=(37, 0, 91, 5)) -> tuple[str, str]:
    """Routed experts in bf16 (one grouped matmul on GPU) against the fp32 loop, outputs and gradients."""
    from training.model.moe import expert_outputs

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    weights = [torch.randn(experts, hidden, 2 * inner) / hidden ** 0.5, torch.randn(experts, inner, hidden) / inner ** 0.5]
    x = torch.randn(sum(counts), hidden)
    ids = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts)).to(device)

    def run(dtype):
        gate_up, down = (w.to(device, dtype).requires_grad_() for w in weights)
        inputs = x.to(device, dtype).requires_grad_()
        ns = types.SimpleNamespace(num_experts=experts, gate_up_proj=gate_up, down_proj=down, act_fn=torch.nn.functional.silu)
        out = expert_outputs(ns, inputs, ids)
        out.float().square().sum().backward()
        return [t.float() for t in (out, inputs.grad, gate_up.grad, down.grad)]

    got, want = run(dtype), run(torch.float32)
    worst = max(((a - b).norm() / b.norm()).item() for a, b in zip(got, want))
    return ("ok" if worst < 2e-2 else "FAILED"), f"groups {list(counts)}: worst relative error {worst:.1e} ({dtype})"


def loss_kernels(device, tokens=8192, hidden=4096, vocab=128256) -> tuple[str, str]:
    """The trainer's fused loss against liger's (where installed; else the chunked one): loss,
    gradients and forward+backward time."""
    from training.model.loss import linear_cross_entropy

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    h = (torch.randn(tokens, hidden, device=device) / 4).to(dtype)
    w = (torch.randn(vocab, hidden, device=device) / hidden ** 0.5).to(dtype)
    y = torch.randint(0, vocab, (tokens,), device=device)
    y[: tokens // 4] = -100
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="sum", accum_dtype=torch.float32)
        other, name = (lambda hh, ww: liger(ww, hh, y)), "liger"
    except ImportError:
        other, name = (lambda hh, ww: linear_cross_entropy(hh[None], ww, y[None], 1024, fused=False)), "chunked"
    ours = lambda hh, ww: linear_cross_entropy(hh[None], ww, y[None], 1024, fused=True)  # noqa: E731

    def timed(fn):
        results, times = None, []
        for _ in range(6):
            hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
            start = time.perf_counter()
            loss = fn(hh, ww)
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            results = [loss.detach().float(), hh.grad.float(), ww.grad.float()]
        return results, sorted(times[1:])[len(times[1:]) // 2]

    (a, ta), (b, tb) = timed(ours), timed(other)
    worst = max(((x - z).norm() / z.norm()).item() for x, z in zip(a, b))
    return ("ok" if worst < 1e-2 else "FAILED"), (f"fused {ta * 1e3:.1f} ms vs {name} {tb * 1e3:.1f} ms "
                                                  f"({tb / ta:.2f}x); worst relative difference {worst:.1e}")


def host_syncs(configs: Path, run_dir: Path, device) -> tuple[str, str]:
    """Syncs a training step makes before its optimizer step (the third step: warm and compiled)."""
    import torch.distributed as dist

    from training.runtime.arguments import parse_args
    from training.runtime.elastic import ElasticStop
    from training.runtime.process import Process
    from training.trainer import Trainer

    trainer = Trainer(Process(parse_args(["--config-dir", str(configs), "--run-dir", str(run_dir)]), ElasticStop()))
    try:
        loader = trainer._loader()
        trainer.model.train()
        for _ in range(2):
            trainer.train_step([next(loader) for _ in range(trainer.plan.grad_accum_steps)])
        if device.type != "cuda":
            return "skipped", "no GPU"
        seen: list[int] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hook = trainer.optimizer.register_step_pre_hook(lambda *args: seen.append(len(caught)))
            torch.cuda.set_sync_debug_mode("warn")
            try:
                trainer.train_step([next(loader) for _ in range(trainer.plan.grad_accum_steps)])
            finally:
                torch.cuda.set_sync_debug_mode("default")
                hook.remove()
    finally:
        dist.destroy_process_group()  # the memory check traces in this process: it makes its own group
    # the debug mode's warnings only: the step's other warnings (deprecations, its own notice) are not syncs
    syncs = [str(w.message).splitlines()[0][:80] for w in caught[:seen[0] if seen else len(caught)]
             if "synchronizing CUDA operation" in str(w.message)]
    return ("ok" if not syncs else "FAILED"), f"{len(syncs)} before the update" + (
        f": {'; '.join(sorted(set(syncs)))}" if syncs else "")


def memory_against_plan(tmp: Path, nproc: int, data: Path) -> list[tuple[str, str, str]]:
    """Peak reserved GiB of the llama_1b shape's steps against trace + allowance, FSDP and HSDP."""
    from elastic_launcher.planning.memory import Allowance, with_allowance
    from training.contract.config import load_job_config
    from training.memory_trace import trace_step

    rows = []
    for name, degree in [("fsdp", nproc)] + ([("hsdp", nproc // 2)] if nproc >= 2 else []):
        configs = render(tmp / name, "llama_1b", nproc, 8, data,
                         [f"recipes.training_config.model_config.sharding_degree={degree}"])
        measured = run_trainer(configs, tmp / f"run-{name}", nproc)
        cfg = load_job_config(configs / "config-n1.yaml")
        arch = dict(cfg.training_config.model_config.architecture)
        step = trace_step(cfg, degree, cfg.training_config.training_args.micro_train_batch_size, 2, arch)
        planned = with_allowance(step.peak_gib, Allowance.of(arch, cfg.training_config, degree < nproc,
                                                             cfg.training_config.training_args.micro_train_batch_size))
        rows.append((f"6. memory, {name} over {degree} of {nproc} GPU(s)", "ok" if measured["reserved_gib"] <= planned else
                     "OVER", f"peak reserved {measured['reserved_gib']:.1f} GiB, planned {planned:.1f} GiB"))
    return rows


FAMILY_SHAPES = ("gemma4_e4b_6l", "qwen3_5_4b_4l", "nemotron3_nano_4l")
TRAINING_ARGS = "recipes.training_config.training_args"


def families(tmp: Path, data: Path, shapes: tuple[str, ...] = FAMILY_SHAPES) -> list[tuple[str, str, str]]:
    """Six steps of each family on one GPU, its decoder layers compiled (also where the trainer's
    default trains the family eager: EAGER_FAMILIES): the kernels only a GPU runs (flex attention's
    compiled kernels at 256- and 512-wide heads, flash-linear-attention's Gated DeltaNet, grouped
    experts). A failure's output ends on stderr (a compile error's cause is above its last line)."""
    rows = []
    for shape in shapes:
        try:
            configs = render(tmp, shape, 1, 6, data, (f"{TRAINING_ARGS}.learning_rate=1e-4",
                                                      f"{TRAINING_ARGS}.min_learning_rate=1e-5",
                                                      "recipes.training_config.model_config.compile=true"))
            measured = run_trainer(configs, tmp / f"run-{shape}", 1, steady_after=2)
            losses = measured["losses"]
            fine = all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
            rows.append((f"8. {shape}", "ok" if fine else "FAILED",
                         f"losses {' '.join(f'{x:.2f}' for x in losses)}; {measured['tokens_per_s']:,.0f} tokens/s, "
                         f"peak {measured['peak_gib']:.1f} GiB"))
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the next family still runs
            print(str(error)[:4000] + "\n...\n" + str(error)[-4000:], file=sys.stderr, flush=True)
            rows.append((f"8. {shape}", "FAILED", cause(error)))
    return rows


def wide_head_attention(device, heads=8, kv_heads=2, tokens=2048, width=512, window=512) -> tuple[str, str]:
    """Flex attention (compiled, bf16) with Gemma 4's 512-wide global heads and its sliding window, at
    the trainer's tiles for them, forward and backward, against fp32 attention with the same masks."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from training.model.attention import wide_head_tiles

    torch.manual_seed(0)
    q = torch.randn(1, heads, tokens, width, device=device, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, kv_heads, tokens, width, device=device, dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    worst = {}
    causal = {"global": lambda b, h, i, j: j <= i, "sliding": lambda b, h, i, j: (j <= i) & (i - j < window)}
    for name, keep in causal.items():
        mask = create_block_mask(keep, None, None, tokens, tokens, device=device)
        out = torch.compile(flex_attention)(q, k, v, block_mask=mask, enable_gqa=True, scale=1.0,
                                            kernel_options=wide_head_tiles(device.index or 0))
        grads = torch.autograd.grad(out.float().square().mean(), (q, k, v))
        q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
        i, j = torch.arange(tokens, device=device)[:, None], torch.arange(tokens, device=device)[None]
        dense = keep(None, None, i, j)
        ref = torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, attn_mask=dense, scale=1.0,
                                                               enable_gqa=True)
        ref_grads = torch.autograd.grad(ref.square().mean(), (q32, k32, v32))
        worst[name] = max(((a.float() - b).norm() / b.norm()).item()
                          for a, b in zip((out, *grads), (ref, *ref_grads)))
    return ("ok" if max(worst.values()) < 2e-2 else "FAILED"), \
        "worst relative difference to fp32 (output, dq, dk, dv): " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())


def unpacked_attention(device, shape: str = "llama_1b", rows: int = 2) -> tuple[str, str]:
    """Rows of one sample each (DPO, GRPO's updates, unpacked SFT), right-padded, through the whole
    model: the trainer's `causal_sdpa` (causal over the row, no mask: flash attention) against SDPA
    with the padding mask transformers builds (a masked kernel), forward and backward, eager. The
    real tokens' loss is the same either way (padding only follows them)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.model.attention import CAUSAL_SDPA, use_causal_sdpa

    arch, seq = dict(SHAPES[shape][1]), SHAPES[shape][2]
    config = AutoConfig.for_model(arch.pop("model_type"), **arch)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype)
    lengths = torch.randint(seq // 2, seq + 1, (rows,))
    keep = (torch.arange(seq)[None] < lengths[:, None]).to(device)
    ids = torch.randint(0, config.vocab_size, (rows, seq), device=device)
    labels = ids.masked_fill(~keep, -100)

    def timed(mask) -> tuple[float, float]:
        times, loss = [], None
        for _ in range(6):
            start = time.perf_counter()
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            model.zero_grad(set_to_none=True)
        return sorted(times[2:])[len(times[2:]) // 2], loss.item()

    masked, masked_loss = timed(keep.long())
    use_causal_sdpa()
    model.set_attn_implementation(CAUSAL_SDPA)
    causal, causal_loss = timed(None)
    real = int(keep.sum())
    same = abs(causal_loss - masked_loss) <= 1e-2 * abs(masked_loss)
    faster = causal <= masked or device.type != "cuda"  # CPU times here only check the bench runs
    return ("ok" if same and faster else "FAILED"), (
        f"{shape}, {rows} rows of {seq} ({real} real tokens): causal, no mask {real / causal:,.0f} tokens/s, "
        f"padding mask {real / masked:,.0f} tokens/s ({masked / causal:.2f}x); loss {causal_loss:.4f} vs {masked_loss:.4f}")


def profile(options: list[str]) -> tuple[str, str]:
    """bench/gpu_profile.py: the trainer's step and the compiled loop's by kernel category."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_profile.py"), *options], capture_output=True,
                          text=True)
    print(done.stdout[-4000:], file=sys.stderr, flush=True)
    if done.returncode:
        return "FAILED", cause(RuntimeError(done.stderr or done.stdout))
    return "ok", " ".join(line.strip() for line in done.stdout.splitlines() if line.startswith(("|", "llama", "smoke")))


def restart(nproc: int) -> tuple[str, str]:
    """bench/compile_restart.py on the 1B shape: process start to the first step, cold and warm cache."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "compile_restart.py"), f"--nproc={nproc}",
                           "--shape=llama_1b"], capture_output=True, text=True)
    if done.returncode:
        return "FAILED", cause(RuntimeError(done.stderr or done.stdout))
    return "ok", done.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=1, help="GPUs of this node to use")
    parser.add_argument("--cpu", action="store_true", help="the parts that run on CPU, tiny shapes")
    parser.add_argument("--only", default="1,2,3,4,5,6,7,8,9,10,11,12",
                        help="the checks to run, by number (e.g. --only 5,6)")
    parser.add_argument("--families", default=",".join(FAMILY_SHAPES), help="check 8's shapes")
    parser.add_argument("--kernels", help="where check 10 keeps each side's longest kernels (JSON)")
    args, throughput_args = parser.parse_known_args()
    if not args.cpu and not torch.cuda.is_available():
        sys.exit("error: no GPU here: run bench/gpu_smoke.py on a GPU node (or --cpu to check the bench itself)")
    device = torch.device("cuda", 0) if not args.cpu else torch.device("cpu")
    rows: list[tuple[str, str, str]] = []

    def check(name: str, run) -> None:
        """Run one check; its rows (one, or a list) are kept and shown at once, a failure is a row too."""
        if name.split(".")[0] not in args.only.split(","):
            return
        try:
            found = run()
            found = found if isinstance(found, list) else [(name, *found)]
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the table goes on; the row says what broke
            found = [(name, "FAILED", cause(error))]
        for row in found:
            rows.append(row)
            print(" | ".join(row), file=sys.stderr, flush=True)

    check("1. self-check", self_check)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "chats.jsonl"
        synthetic_chats(data, rows=400, max_words=128)
        configs = render(tmp, "smoke" if args.cpu else "smoke_gpu", 1, 3, data)
        check("2. one training step",
              lambda: ("ok", f"{run_trainer(configs, tmp / 'run', 1, steady_after=0)['tokens_per_s']:,.0f} tokens/s"))
        small = {} if not args.cpu else {"tokens": 256, "hidden": 64, "vocab": 1000}
        check("3. grouped experts, unaligned groups", lambda: grouped_experts(device))
        check("4. fused loss", lambda: loss_kernels(device, **small))
        check("5. host syncs in a step", lambda: host_syncs(configs, tmp / "syncs", device))
        if not args.cpu:
            synthetic_chats(long := tmp / "long.jsonl", rows=800, max_words=2048)
            check("6. memory", lambda: memory_against_plan(tmp, args.nproc, long))
            check("7. bench/gpu_throughput.py", lambda: throughput(args.nproc, throughput_args))
            check("8. wide-head attention", lambda: wide_head_attention(device))
            check("8. families", lambda: families(tmp, long, tuple(args.families.split(","))))
            check("9. GRPO on vLLM", lambda: grpo_on_vllm(tmp))
            check("10. where a step's time goes", lambda: profile([f"--out={args.kernels}"] if args.kernels else []))
            check("11. unpacked attention", lambda: unpacked_attention(device))
            check("12. a restart's compile", lambda: restart(args.nproc))
        else:
            check("11. unpacked attention", lambda: unpacked_attention(device, "smoke"))
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    print(f"gpu_smoke on {name} ({args.nproc} process(es)), {datetime.date.today()}, torch {torch.__version__}")
    print("| check | result | figures |\n|---|---|---|")
    for check_name, result, figures in rows:
        print(f"| {check_name} | {result} | {figures} |")
    return 0 if all(r[1] in ("ok", "skipped") for r in rows) else 1


# Each request seeded by its completion's coordinates (training.rl.vllm_rollout): drawn alone or in a
# batch of four, the same tokens where vLLM's batch invariance holds (argv[2]: "1" on, "0" off). A share
# of the GPU that fits beside what the earlier checks hold, and no prefix cache (it would hand the
# "together" draw the "alone" draws' KV).
INVARIANCE = """
import json, os, sys
os.environ["VLLM_BATCH_INVARIANT"] = sys.argv[2]
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from training.rl.rollout import PromptGroup
from training.rl.sampling import SamplingParams as Params
from training.rl.vllm_rollout import sampling_requests

llm = LLM(model=sys.argv[1], dtype="bfloat16", seed=0, gpu_memory_utilization=0.3, enable_prefix_caching=False)
groups = [PromptGroup(i, tuple(range(3 + i, 40 + 7 * i))) for i in range(4)]
requests = sampling_requests(groups, 1, Params(1.0, 1.0, -1, 64), step=3, seed=0)


def draw(batch):
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids, _ in batch],
                           [SamplingParams(**kw) for _, kw in batch], use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


alone = [draw([r])[0] for r in requests]
print("RESULT", json.dumps({"same": alone == draw(requests), "tokens": sum(map(len, alone))}))
"""

# An engine as the trainer runs it (the pods' PYTORCH_ALLOC_CONF, sleep level 2 after the start, torch's
# cache emptied before each wake), GiB in use on the GPU at each point; then shut down with the trainer's
# group kept, and a second engine started in the same process (an in-place resize's next size).
SLEEP_AND_SECOND_ENGINE = """
import gc, json, os, sys
os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
import torch, torch.distributed as dist
from training.rl.vllm_rollout import allocator_settings_for_vllm, shut_down
allocator_settings_for_vllm()
os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0",
                  LOCAL_RANK="0", WORLD_SIZE="1")
dist.init_process_group("cpu:gloo,cuda:nccl")
from vllm import LLM

def used():
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30

def engine():
    return LLM(model=sys.argv[1], dtype="bfloat16", seed=0, gpu_memory_utilization=0.3, load_format="dummy",
               enable_sleep_mode=True, distributed_executor_backend="external_launcher")

before = used()
llm = engine()
awake = used()
llm.sleep(level=2)
asleep = used()
gc.collect(); torch.cuda.empty_cache()
llm.wake_up(tags=["weights"]); llm.wake_up(tags=["kv_cache"])
woken = used()
shut_down(llm)
del llm
gc.collect(); torch.cuda.empty_cache()
second = engine()
print("RESULT", json.dumps({"before": before, "awake": awake, "asleep": asleep, "woken": woken,
                            "second": len(second.generate([[1, 2, 3]], use_tqdm=False)) == 1,
                            "group_kept": dist.is_initialized()}))
"""


def saved_llama(path: Path) -> Path:
    """A small Llama as save_pretrained writes it, with the shipped tokenizer: 64-wide heads, as vLLM's
    attention kernels take them."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "tiny_tokenizer")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def grpo_on_vllm(tmp: Path) -> list[tuple[str, str, str]]:
    from bench.grpo_throughput import METHOD, TA, vllm_overrides
    from elastic_launcher.cli import main as launcher
    from elastic_launcher.local.run import LocalJob
    from elastic_launcher.planning.memory import VLLM_ASLEEP_GIB
    from training.contract.records import read_records

    model = saved_llama(tmp / "grpo_model")
    runs = {}
    for invariant in (False, True):
        out = tmp / f"grpo_{invariant}"
        assert launcher(["recipes=llama/tiny_llama_grpo", *vllm_overrides(str(model), 1),
                         f"+{METHOD}.rollout_gpu_memory_utilization=0.3", f"+{METHOD}.rollout_correction=sequence",
                         f"+{METHOD}.rollout_batch_invariant={str(invariant).lower()}",
                         f"{TA}.max_steps=3", f"{TA}.save_hf_ckpt=false", "cluster.node_local=false",
                         f"output_dir={out}"]) == 0
        job = LocalJob(next(out.iterdir()) / "configs", tmp / f"grpo_run_{invariant}", nproc_per_node=1)
        done = subprocess.run(job.command(1), env=job.env(1), capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stdout[-2000:] + done.stderr[-5000:])
        runs[invariant] = [r for r in read_records(job.run_dir) if "reward" in r]
    steps = runs[False]
    sync = max(r["weight_sync_s"] / r["step_time"] for r in steps)
    weight = steps[-1]["rollout_correction_weight"]

    def update_s(run):  # the last step's updates alone (the first compiles)
        r = run[-1]
        return r["step_time"] - r["rollout_s"] - r["reward_s"] - r["logprob_s"]

    rows = [("9. GRPO on vLLM, three steps", "ok" if len(steps) == 3 and abs(weight - 1) < 0.05 else "FAILED",
             f"{len(steps)} steps, rollout {steps[-1]['rollout_tokens_per_s']:,.0f} tokens/s, weight sync "
             f"{sync:.1%} of a step at most (goal < 5%), rollout correction weight (vLLM's log-probabilities "
             f"against the trainer's, bf16) {weight:.4f}"),
            ("9. batch invariance's cost", "ok" if len(runs[True]) == 3 else "FAILED",
             f"updates {update_s(runs[True]):.3f} s with VLLM_BATCH_INVARIANT=1 against {update_s(runs[False]):.3f} s "
             f"without ({update_s(runs[True]) / update_s(runs[False]):.2f}x); rollout "
             f"{runs[True][-1]['rollout_s']:.3f} s against {runs[False][-1]['rollout_s']:.3f} s")]
    done = subprocess.run([sys.executable, "-c", SLEEP_AND_SECOND_ENGINE, str(model), "29512"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-5000:])
    gib = json.loads(done.stdout.split("RESULT ")[1].splitlines()[0])
    held = gib["asleep"] - gib["before"]
    rows.append(("9. vLLM sleep and a second engine",
                 "ok" if held <= VLLM_ASLEEP_GIB and gib["second"] and gib["group_kept"] else "FAILED",
                 f"GiB in use: {gib['before']:.2f} before, {gib['awake']:.2f} awake, {gib['asleep']:.2f} asleep "
                 f"(level 2 freed {gib['awake'] - gib['asleep']:.2f}; the engine holds {held:.2f}, the plan allows "
                 f"{VLLM_ASLEEP_GIB}), {gib['woken']:.2f} woken; a second engine in the process "
                 f"{'generated' if gib['second'] else 'FAILED'}, the trainer's group "
                 f"{'kept' if gib['group_kept'] else 'DESTROYED'}"))
    for invariant in ("1", "0"):
        done = subprocess.run([sys.executable, "-c", INVARIANCE, str(model), invariant], cwd=ROOT, capture_output=True,
                              text=True)
        if done.returncode:
            raise RuntimeError(done.stderr[-5000:])
        result = json.loads(done.stdout.split("RESULT ")[1].splitlines()[0])
        rows.append((f"9. batch invariance {'on' if invariant == '1' else 'off'}",
                     "ok" if result["same"] or invariant == "0" else "FAILED",
                     f"4 seeded requests alone and together: {'the same' if result['same'] else 'different'} tokens "
                     f"({result['tokens']} drawn)"))
    return rows


def cause(error: BaseException) -> str:
    """The line of a failure that names it: the trainer's own `error:` line, else the last one that
    says "Error" (torchrun's ChildFailedError comes after the trainer's line), else the last one."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return next((line for line in reversed(lines) if line.startswith("error:")),
                next((line for line in reversed(lines) if "Error" in line), lines[-1]))[:300]


def throughput(nproc: int, options: list[str]) -> tuple[str, str]:
    """Its tables are also shown as each shape ends (a shape takes minutes)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "gpu_throughput.py"), f"--nproc={nproc}", *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tables = []
    for line in proc.stdout:  # its own stderr is one short message at most: it cannot fill while this reads
        tables.append(line.strip())
        print(line, end="", file=sys.stderr, flush=True)
    failure = proc.stderr.read()
    if proc.wait():
        return "FAILED", cause(RuntimeError(failure or "\n".join(tables)))
    return "ok", " ".join(tables)


if __name__ == "__main__":
    sys.exit(main())
