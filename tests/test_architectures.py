"""Every architecture in the catalogue, proven on its tiny twin (Qwen2, Qwen3, Llama 4, Qwen 3.5,
Gemma 4, Nemotron-H; Llama and GPT-OSS have their own tests): a resize 3 -> 1 matches a fixed-size run,
DPO under LoRA resumes at another size exactly, the exported model gives the trained model's
logits, each family's chat template labels exactly the assistant's answer, and Llama 4 trains its
text model out of a vision+text checkpoint."""

import pytest
import torch

from conftest import (ROOT, TINY_RECIPES, committed_samples, losses, records, render_configs, tiny_architecture,
                      tiny_causal_lm, train)
from training.batches import IGNORE_INDEX
from training.chat_tokens import tokenize_chat

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
# LoRA DPO's resume and export: Qwen2's adapters sit on biased projections, Llama 4's beside frozen routers
# and fused experts. Qwen3's are Llama's (its q/k norms are no adapter's target): test_lora_dpo.py's.
LORA_TWINS = ["qwen2", "llama4_text"]
NEWEST = ["qwen3_5_text", "gemma4_text", "nemotron_h"]  # linear attention, per-layer embeddings, Mamba-2 + MoE
LORA = "recipes.training_config.model_config.peft_config={peft_type:lora,r:8,lora_alpha:16,lora_dropout:0.0}"
DPO = ["recipes.training_config.training_args.trainer_type=dpo", "recipes.training_config.datasets.packing=false",
       f"recipes.training_config.datasets.train_data={ROOT / 'data' / 'dpo_tiny.jsonl'}"]
STEPS = 6


def assert_same_run(run_dir, fixed_dir, steps=STEPS):
    got, want = losses(run_dir), losses(fixed_dir)
    assert sorted(got) == sorted(want) == list(range(1, steps + 1))
    for step in want:
        assert abs(got[step] - want[step]) <= 1e-5 * abs(want[step]), (step, got[step], want[step])
    assert committed_samples(run_dir) == committed_samples(fixed_dir)


@pytest.mark.parametrize("twin", ["llama4_text", *NEWEST])
def test_a_resize_3_1_matches_the_fixed_size_run(twin, tmp_path):
    """3 -> 1 nodes: the state sharded unevenly over 3 ranks (uneven batches too) gathered whole onto
    one, against one node that never stopped. DCP reshards alike in either direction; the grow
    2 -> 3 is Llama's (tests/test_training_runs.py) and the rehearsals'. The rehearsal's driving of
    the job (signals, the trace, a node's failure) is the same code for every architecture:
    tests/test_rehearsal.py runs it. Qwen2's and Qwen3's state is Llama's plus 1-D biases and norms,
    which Llama's own resize shards unevenly at 3 ranks too; their adapters resume at another size below."""
    steps = 8
    configs = render_configs(tmp_path / "configs", f"recipes.training_config.training_args.max_steps={steps}",
                             "recipes.training_config.logging.audit_samples=true",
                             "recipes.training_config.checkpoint.save_steps=1000", recipe=TINY_RECIPES[twin])
    train(configs, tmp_path / "fixed", nodes=1)
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=3, stop_at_step=4)
    train(configs, run_dir, nodes=1)
    assert [r["world_size"] for r in records(run_dir) if "loss" in r] == [3, 3, 3, 3, 1, 1, 1, 1]
    got, want = losses(run_dir), losses(tmp_path / "fixed")
    if any(abs(got[s] - want[s]) > 1e-5 * abs(want[s]) for s in want):
        # fp32's reduction order differs with the world size, and how far that carries after a few
        # steps depends on the model and the CPU's kernels (Gemma 4 on some x86 CPUs: 6e-5 at step 5,
        # after four at 3 ranks).
        # A resize must then be no farther from the run that never stopped than a fixed-size run at
        # the size it started at is: that run's distance, at each step the largest so far, is the tolerance.
        train(configs, tmp_path / "fixed3", nodes=3)
        other, envelope = losses(tmp_path / "fixed3"), 0.0
        for step in sorted(want):
            envelope = max(envelope, abs(other[step] - want[step]) / abs(want[step]))
            assert abs(got[step] - want[step]) <= max(1e-5, 2 * envelope) * abs(want[step]), (step, got[step],
                                                                                              want[step], envelope)
        assert committed_samples(run_dir) == committed_samples(tmp_path / "fixed")
        return
    assert_same_run(run_dir, tmp_path / "fixed", steps)


@pytest.mark.parametrize("twin", LORA_TWINS)
def test_lora_dpo_resumes_at_another_size_exactly_and_exports(twin, tmp_path):
    """DPO under LoRA (the reference: the base with its adapters off) stopped at 2 nodes and resumed at
    1 equals the run that never stopped, and exports the model it trained. Full-parameter SFT's
    resizes are held above (and for Qwen2's and Qwen3's Llama-shaped state, by Llama's own); LoRA
    SFT's adapters move exactly as these do."""
    overrides = [LORA, *DPO, f"recipes.training_config.training_args.max_steps={STEPS}",
                 "recipes.training_config.logging.audit_samples=true", "recipes.training_config.checkpoint.save_steps=1000",
                 "recipes.training_config.training_args.save_hf_ckpt=true"]
    configs = render_configs(tmp_path / "configs", *overrides, recipe=TINY_RECIPES[twin])
    train(configs, tmp_path / "fixed", nodes=2)
    train(configs, tmp_path / "run", nodes=2, stop_at_step=3)
    train(configs, tmp_path / "run", nodes=1)
    assert_same_run(tmp_path / "run", tmp_path / "fixed")
    assert_exports_the_trained_model(tmp_path / "run", twin)


@pytest.mark.parametrize("twin", NEWEST)
def test_the_exported_model_gives_the_trained_models_logits(twin, tmp_path):
    configs = render_configs(tmp_path / "configs", LORA, "recipes.training_config.training_args.max_steps=4",
                             "recipes.training_config.training_args.save_hf_ckpt=true", recipe=TINY_RECIPES[twin])
    train(configs, tmp_path / "run", nodes=2)
    assert_exports_the_trained_model(tmp_path / "run", twin)


def assert_exports_the_trained_model(run_dir, twin):
    """The merged model transformers loads (and generates from) equals the base with the trained adapters that peft
    injects (module names resolved from "all-linear": Llama 4's router and fused experts stay
    frozen), and differs from the base: the adapters trained."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from training.contract.config import load_job_config
    from training.model.causal_lm import build_model

    merged = AutoModelForCausalLM.from_pretrained(run_dir / "hf")
    assert merged.config.model_type == twin
    mc = load_job_config(run_dir / "job_config.yaml").training_config.model_config
    base = build_model(mc, seed=42)
    ids = torch.randint(0, merged.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits
        adapted = PeftModel.from_pretrained(base, run_dir / "hf_adapter")
        assert torch.allclose(merged(input_ids=ids).logits, adapted(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
        assert merged.generate(ids[:1, :5], min_new_tokens=3, max_new_tokens=3, do_sample=False).shape == (1, 8)
    assert not torch.allclose(merged(input_ids=ids).logits, base_logits, atol=1e-3)
    trained = {n for n, p in adapted.named_parameters() if "lora_" in n}
    assert not any(".experts." in n or ".router." in n for n in trained)


CONVERSATION = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 plus 3?"},
                {"role": "assistant", "content": "2 plus 3 is 5."}, {"role": "user", "content": "And 4 plus 4?"},
                {"role": "assistant", "content": "4 plus 4 is 8."}]


@pytest.mark.parametrize("family, kwargs, closing", [
    ("chatml_qwen2", {}, "<|im_end|>"), ("qwen3", {"enable_thinking": False}, "<|im_end|>"),
    ("deepseek_r1_distill", {}, "<｜end▁of▁sentence｜>"), ("llama4", {}, "<|eot|>")])
def test_labels_cover_exactly_each_answer_and_its_closing_token(family, kwargs, closing):
    """Prompts stay masked under each family's template: the labelled spans are the two answers,
    each with the token that ends its turn, even where the generation prompt opens a reasoning
    block the answer does not have (Qwen3 without thinking, R1's "<think>")."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "tiny_tokenizers" / family)
    out = tokenize_chat(CONVERSATION, tokenizer, 10_000, **kwargs)
    spans, current = [], []
    for token, label in zip(out["input_ids"], out["labels"]):
        if label != IGNORE_INDEX:
            assert label == token
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    spans += [tokenizer.decode(current)] if current else []
    assert spans == [f"2 plus 3 is 5.{closing}", f"4 plus 4 is 8.{closing}"]


def test_r1_distill_template_drops_past_reasoning_and_qwen3_keeps_the_last():
    """The templates' own handling of reasoning is kept: R1's drops it from an answer, Qwen3's keeps
    the final answer's reasoning (and labels it: the model learns to reason)."""
    from transformers import AutoTokenizer

    answer = "<think>\nadd them\n</think>\n\n4 plus 4 is 8."
    conversation = [*CONVERSATION[:-1], {"role": "assistant", "content": answer}]
    labelled = {}
    for family, kwargs in (("deepseek_r1_distill", {}), ("qwen3", {"enable_thinking": False})):
        tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "tiny_tokenizers" / family)
        out = tokenize_chat(conversation, tokenizer, 10_000, **kwargs)
        labelled[family] = tokenizer.decode([t for t in out["labels"] if t != IGNORE_INDEX])
    assert "add them" not in labelled["deepseek_r1_distill"] and "4 plus 4 is 8." in labelled["deepseek_r1_distill"]
    assert "add them\n</think>\n\n4 plus 4 is 8." in labelled["qwen3"]


def test_qwen3_recipes_train_without_thinking():
    from elastic_launcher.config.compose import compose, options, to_plain

    qwen3 = [r for r in options("recipes") if r.startswith("qwen/qwen3") or r == "qwen/tiny_qwen3_sft"]
    assert len(qwen3) >= 19
    for recipe in qwen3:
        plain = to_plain(compose([f"recipes={recipe}"])[0])["recipes"]
        assert plain["training_config"]["datasets"]["enable_thinking"] is False, recipe


def test_llama4_trains_the_text_model_out_of_a_vision_and_text_checkpoint(tmp_path, process_group):
    """The shard-by-shard path reads the language model's weights from under `language_model.`
    (the vision tower is left on disk) into the text model's own names."""
    from safetensors.torch import load_file
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import Llama4Config, Llama4ForConditionalGeneration

    from training.contract.config import ModelConfig
    from training.model.causal_lm import build_sharded_model

    text = {k: v for k, v in tiny_architecture("llama4_text").items() if k != "model_type"}
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14, vision_output_dim=64, projector_input_dim=64, projector_output_dim=64)
    torch.manual_seed(0)
    Llama4ForConditionalGeneration(Llama4Config(text_config={**text, "vocab_size": 600}, vision_config=vision)
                                   ).save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    model = build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=1,
                                mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False, source=str(tmp_path))
    loaded = {k: v.full_tensor() for k, v in model.state_dict().items()}
    assert loaded and all(torch.equal(value, stored[f"language_model.{key}"]) for key, value in loaded.items())
    assert type(model.config).__name__ == "Llama4TextConfig"


def test_llama4_routed_experts_equal_transformers_all_expert_forward():
    """Each token through its chosen expert only gives transformers' loss and every gradient (float64),
    and runs the FLOPs the MFU count assumes: 2 x tokens x (router + shared expert + top_k/E of the
    experts) per MoE block in forward, not the E/top_k times more of transformers' dense form."""
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from training.model.moe import route_experts

    dense = tiny_causal_lm("llama4_text", float64=True)
    routed = route_experts(copy.deepcopy(dense))
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(24).expand(2, -1)
    losses = []
    for model in (dense, routed):
        loss = model(ids, positions, ids)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-12, atol=0)
    for (name, want), (_, got) in zip(dense.named_parameters(), routed.named_parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-10, atol=1e-12, msg=name)

    moe = next(m for m in routed.modules() if type(m).__name__ == "Llama4TextMoe")
    hidden = torch.randn(48, moe.hidden_dim, dtype=torch.float64)
    with FlopCounterMode(display=False) as counter:
        moe(hidden)
    experts = sum(p.numel() for p in moe.experts.parameters())
    active = moe.router.weight.numel() + sum(p.numel() for p in moe.shared_expert.parameters()) + \
        experts * moe.top_k // moe.num_experts
    assert counter.get_total_flops() == 2 * 48 * active
