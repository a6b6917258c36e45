"""The memory trace of the trainer's step (training/memory_trace.py), held against what can be
counted exactly, and the FSDP units it exposed. The traces run in a process of their own: each
starts a fake process group of the traced world size."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.xdist_group("test_memory_trace")]  # on one worker: its tests share module fixtures
WORLD = 4
# Embeddings and head dominate this shape (2 x 8.2M parameters against 4 x 0.8M in the layers).
SHAPE = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000, "tie_word_embeddings": False}
LORA = "recipes.training_config.model_config.peft_config={peft_type:lora,r:8,lora_alpha:16,lora_dropout:0.0}"

# One process traces every case of this module (each trace starts and ends its own fake process
# group of the traced world size): a case is the recipe's overrides, the world, the HSDP shard degree
# (None: FSDP over the whole world, as the 1-node plan is sharded over the traced world instead) and
# the micro-steps; the parameter counts come from the model the trainer builds.
TRACES = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from dataclasses import asdict, replace
from elastic_launcher.config.compose import compose, to_plain
from elastic_launcher.planning.plan import make_plan
from training.memory_trace import trace_step
from training.model.causal_lm import build_model
shape, results = json.loads(sys.argv[1]), []
for case in json.loads(sys.argv[2]):
    plan = make_plan(to_plain(compose([f"recipes={case['recipe']}", "recipes.elastic_policy.is_elastic=true",
                                       "recipes.training_config.model_config.mixed_precision=bf16",
                                       *case["overrides"]])[0])["recipes"])
    cfg = plan.sizes[0].config
    tc = cfg.training_config
    sharding = {"sharding": "fsdp", "sharding_degree": None} if case["degree"] is None else {"sharding_degree": case["degree"]}
    cfg = replace(cfg, training_config=replace(tc, model_config=replace(tc.model_config, **sharding)))
    step = trace_step(cfg, case["world"], micro_batch=2, micro_steps=case["micro_steps"], model_shape=shape)
    mc = replace(cfg.training_config.model_config, architecture=shape, model_name_or_path=None)
    model = build_model(mc, seed=0)
    if mc.lora:
        from training.model.lora import apply_lora
        model = apply_lora(model, mc.peft_config)
    results.append({"step": asdict(step), "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                    "frozen": sum(p.numel() for p in model.parameters() if not p.requires_grad)})
print(json.dumps(results))
"""
CASES = {"full": ([], WORLD, None, 1), "lora": ([LORA], WORLD, None, 1),
         "hsdp 2x2": ([], 4, 2, 2), "fsdp over 2": ([], 2, 2, 2), "fsdp over 4": ([], 4, 4, 2),
         "grpo": (["recipes.training_config.training_args.method_args.max_new_tokens=32"], WORLD, None, 1)}
RECIPES = {"grpo": "llama/tiny_llama_grpo"}  # else llama/tiny_llama_sft


@pytest.fixture(scope="module")
def traced() -> dict[str, dict]:
    cases = [{"overrides": o, "world": w, "degree": d, "micro_steps": m, "recipe": RECIPES.get(name, "llama/tiny_llama_sft")}
             for name, (o, w, d, m) in CASES.items()]
    done = subprocess.run([sys.executable, "-c", TRACES, json.dumps(SHAPE), json.dumps(cases)], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(zip(CASES, json.loads(done.stdout.strip().splitlines()[-1])))


def gib(n_bytes: float) -> float:
    return n_bytes / 2**30


def test_the_trace_counts_full_training_state_exactly(traced):
    """fp32 master weights (4 bytes a parameter) and AdamW's two moments (8) over the world size:
    every dimension here divides by 4, so FSDP pads nothing and the count is exact."""
    got = traced["full"]
    split, params = got["step"]["split_gib"], got["trainable"]
    assert got["frozen"] == 0
    assert split["sharded state"] == pytest.approx(gib(4 * params / WORLD), abs=1e-3)
    assert split["optimizer"] == pytest.approx(gib(8 * params / WORLD), abs=1e-3)
    assert got["step"]["peak_gib"] == pytest.approx(sum(split.values()), abs=1e-2)


def test_the_trace_counts_lora_state_exactly(traced):
    """Under LoRA in bf16 the frozen base is stored in bf16 (2 bytes), the adapters in fp32 with their
    moments (4 + 8): the optimizer holds nothing for the base."""
    got = traced["lora"]
    split = got["step"]["split_gib"]
    assert got["trainable"] < got["frozen"] / 20
    assert split["sharded state"] == pytest.approx(gib((2 * got["frozen"] + 4 * got["trainable"]) / WORLD), abs=1e-3)
    assert split["optimizer"] == pytest.approx(gib(8 * got["trainable"] / WORLD), abs=1e-3)


def test_embeddings_and_head_are_never_gathered_together(traced):
    """Embeddings and LM head are FSDP units of their own, each gathered (and its gradient reduced)
    only around its own forward and backward. At the step's peak FSDP's working set (gathered
    parameters and gradients in flight) holds at most one of them: FSDP's all-gather holds a unit
    twice while it copies it out, so under 3x one in bf16. In the root unit both stayed gathered
    from the first forward, and their gradients unreduced until the end of backward (6x here)."""
    got = traced["full"]
    split, embedding_bf16 = got["step"]["split_gib"], 2 * SHAPE["vocab_size"] * SHAPE["hidden_size"]
    assert split["gathered parameters"] + split["gradients"] < gib(3 * embedding_bf16)


def test_fsdp_units_of_a_tied_and_an_untied_model(process_group):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    from conftest import tiny_causal_lm
    from training.model.causal_lm import apply_fsdp

    mesh = init_device_mesh("cpu", (1,))
    untied = apply_fsdp(tiny_causal_lm(), mesh, "bf16")
    assert isinstance(untied.model.embed_tokens, FSDPModule) and isinstance(untied.lm_head, FSDPModule)
    tied = tiny_causal_lm()
    tied.lm_head.weight = tied.model.embed_tokens.weight
    tied = apply_fsdp(tied, mesh, "bf16")  # one weight used at both ends: it stays in the root
    assert not isinstance(tied.model.embed_tokens, FSDPModule) and not isinstance(tied.lm_head, FSDPModule)
    # bf16 compute on CPU too: the policy follows the setting, not the device.
    seen = []
    untied.model.layers[0].register_forward_hook(lambda module, args, out: seen.append(args[0].dtype))
    ids = torch.randint(0, 97, (1, 8))
    loss = untied(ids, torch.arange(8).unsqueeze(0), ids)
    loss.backward()
    assert seen == [torch.bfloat16] and untied.lm_head.weight.grad.dtype == torch.float32


REDUCES = """
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore
from conftest import tiny_causal_lm
from training.batches import collate
from training.methods.sft import SFT
from training.model.causal_lm import apply_fsdp
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))  # HSDP: 2 nodes x 2 GPUs
calls = {"all_reduce": 0, "reduce_scatter": 0}
for name in calls:
    original = getattr(dist, name + ("" if name == "all_reduce" else "_tensor"))
    def counted(*args, _original=original, _name=name, **kwargs):
        calls[_name] += 1
        return _original(*args, **kwargs)
    setattr(dist, name + ("" if name == "all_reduce" else "_tensor"), counted)
rows = [{"input_ids": list(range(1, 9)), "labels": list(range(1, 9)), "sample_ids": [i], "lengths": [8]} for i in range(2)]
counts = []
for micro_steps in json.loads(sys.argv[1]):  # a fresh model per step count: no gradients carried over
    model = apply_fsdp(tiny_causal_lm(), mesh, "fp32")
    calls.update(all_reduce=0, reduce_scatter=0)
    micro_batches = [collate(rows) for _ in range(micro_steps)]
    SFT(None, None, torch.device("cpu")).forward_backward(model, micro_batches, torch.tensor(28.0), 4)
    counts.append(dict(calls))
print(json.dumps(counts))
"""


def test_hsdp_reduces_across_nodes_once_per_step():
    """Gradient accumulation under HSDP: the in-node reduce-scatter runs after every micro-batch's
    backward, the all-reduce across nodes only after the last (one per FSDP unit per step)."""
    done = subprocess.run([sys.executable, "-c", REDUCES, "[1, 3]"], cwd=ROOT / "tests", capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    one, three = json.loads(done.stdout.strip().splitlines()[-1])
    assert one["all_reduce"] > 0 and three["all_reduce"] == one["all_reduce"]
    assert three["reduce_scatter"] == 3 * one["reduce_scatter"]


def test_scoring_rows_one_by_one_holds_one_rows_logits_at_a_time():
    """DPO scores its rows one by one (per-sequence log-probabilities). A row shorter than a loss
    chunk still runs under checkpointing, so its logits are not kept for backward while the next
    rows are scored: eight 4096-token rows over a 128K vocabulary hold about one row's logits and
    their gradient at a time (each 2 GiB in fp32), not eight rows' (the unchunked fallback's 16+
    GiB). Traced on fake tensors: nothing is allocated."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from training.model.loss import LossHead
    from training.memory_trace import LiveMemory

    rows, tokens, hidden, vocab = 8, 4096, 1024, 128256
    with FakeTensorMode():
        head = LossHead.replacing(torch.nn.Linear(hidden, vocab, bias=False), loss_chunk_tokens=8192)
        head.weight = torch.nn.Parameter(torch.empty(vocab, hidden))
        states = torch.empty(rows, tokens, hidden, requires_grad=True)
        labels = torch.zeros(rows, tokens, dtype=torch.long)
        mem = LiveMemory()
        with mem:
            head(states, labels, per_sequence=True).sum().backward()
    row_logits_fp32 = tokens * vocab * 4
    assert mem.peak < 4 * row_logits_fp32


def test_fsdp_splits_each_parameter_where_it_pads_least():
    """FSDP pads dimension 0 to a multiple of the ranks (and splits no other dimension unevenly):
    GPT-OSS-20B's 32 fused experts over 64 ranks would be held twice over on dimension 0, so they
    split along the hidden size instead; an ordinary weight, or one no other dimension divides,
    stays on dimension 0."""
    import torch
    from torch.distributed.tensor import Shard

    from training.model.causal_lm import least_padding

    placement = least_padding(64)
    assert placement(torch.nn.Parameter(torch.empty(32, 2880, 5760, device="meta"))) == Shard(1)
    assert placement(torch.nn.Parameter(torch.empty(4096, 4096, device="meta"))) == Shard(0)
    assert placement(torch.nn.Parameter(torch.empty(4096, device="meta"))) == Shard(0)
    assert least_padding(3)(torch.nn.Parameter(torch.empty(64, 128, device="meta"))) == Shard(0)


def test_an_hsdp_rank_holds_what_an_fsdp_rank_of_its_shard_group_holds(traced):
    """The planner reads an HSDP size's memory from the trace of FSDP over its shard group
    (planning.memory.trace_inputs): the state sharded over 2 of 4 ranks, replicated twice, peaks
    where FSDP over 2 ranks does, in every category, gradient accumulation included."""
    hsdp, fsdp, fsdp_over_all = (traced[case]["step"] for case in ("hsdp 2x2", "fsdp over 2", "fsdp over 4"))
    assert (hsdp["peak_gib"], hsdp["split_gib"]) == (fsdp["peak_gib"], fsdp["split_gib"])
    assert fsdp_over_all["split_gib"]["sharded state"] < hsdp["split_gib"]["sharded state"]  # the mesh did change


def test_gated_deltanet_layers_are_traced_with_the_kernels_memory():
    """Qwen 3.5's linear-attention layers run the stand-in for the image's chunked kernel
    (flash-linear-attention) through forward and backward, never transformers' torch fallback (minutes
    a layer on fake tensors at a real shape, and more memory than the GPU holds), which is back in
    place after the trace."""
    script = """
import warnings
warnings.filterwarnings("ignore")
from elastic_launcher.config.compose import compose, to_plain
from elastic_launcher.planning.plan import make_plan
from transformers.models.qwen3_5 import modeling_qwen3_5
import training.memory_trace as memory_trace

def fallback(*args, **kwargs):
    raise AssertionError("the trace reached the torch fallback")

modeling_qwen3_5.torch_chunk_gated_delta_rule = fallback
backward = memory_trace._ChunkedGatedDeltaRule.backward
calls = []
memory_trace._ChunkedGatedDeltaRule.backward = staticmethod(lambda ctx, g: calls.append(1) or backward(ctx, g))
plan = make_plan(to_plain(compose(["recipes=qwen/tiny_qwen3_5_sft", "recipes.elastic_policy.is_elastic=true"])[0])["recipes"])
size = plan.sizes[0]
step = memory_trace.trace_step(size.config, 2, size.batch.micro_batch, 1)
assert modeling_qwen3_5.torch_chunk_gated_delta_rule is fallback
print(len(calls), step.peak_gib > 0)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["3", "True"]  # three linear-attention layers, each through the kernel's backward


def test_a_grpo_update_holds_the_reference_beside_the_policy_and_its_completions_activations(traced):
    """GRPO in full-parameter training traces an update: the frozen reference model (kl_coef > 0) is
    held beside the policy in the same storage, and the update's rows are each prompt's completions
    (2 prompts x 4 completions of 32 + 32 tokens: 8 rows of 64 tokens, four times the SFT twin's 2 rows
    of 64), so its activations are several times SFT's."""
    grpo, sft = traced["grpo"]["step"]["split_gib"], traced["full"]["step"]["split_gib"]
    params = traced["full"]["trainable"]
    assert grpo["sharded state"] == pytest.approx(sft["sharded state"] + gib(4 * params / WORLD), abs=1e-3)
    assert grpo["optimizer"] == pytest.approx(sft["optimizer"], abs=1e-3)
    assert grpo["activations"] > 2 * sft["activations"]
