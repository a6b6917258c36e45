"""Compiled decoder layers meet one micro-batch shape: on GPU (flex attention, bf16, compilation,
full activation checkpointing) a micro-batch of another row count or mask kind is a recompile, and a
run that outgrew torch's limit crashed at the same data on every restart. Here the GPU's
configuration is forced on CPU (attention stays the CPU's: flex has no CPU backward) at an uneven
size whose first rank has an empty micro-batch, with evaluation rounds holding fewer rows: each rank
compiles at most one more graph per layer kind, and only for an unpacked row's bucketed width.

The layers compile with the aot_eager backend (ELASTIC_COMPILE_BACKEND): guards, and so recompiles,
are dynamo's and do not depend on the backend; inductor would take minutes per graph on CPU."""

import re

import pytest

from conftest import ROOT, records, render_configs, tiny_architecture, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU_CONFIGURATION = ["recipes.training_config.model_config.compile=true",
                     "recipes.training_config.model_config.mixed_precision=bf16",
                     "recipes.training_config.model_config.activation_checkpointing=full",
                     "recipes.training_config.training_args.max_steps=4",
                     "recipes.training_config.training_args.eval_steps=2",
                     "recipes.training_config.datasets.train_val_split_ratio=0.8"]
LORA_DPO = ["+recipes.training_config.model_config.peft_config={peft_type: lora, r: 4, lora_alpha: 8, lora_dropout: 0.0}",
            "recipes.training_config.training_args.trainer_type=dpo",
            f"recipes.training_config.datasets.train_data={ROOT / 'data' / 'dpo_tiny.jsonl'}"]


@pytest.mark.parametrize("model_type, recipe, overrides", [
    ("gpt_oss", "gpt_oss/tiny_gpt_oss_sft", []),
    ("llama4_text", "llama/tiny_llama4_sft", []),
    ("llama4_text", "llama/tiny_llama4_sft", LORA_DPO),
    ("gpt_oss", "gpt_oss/tiny_gpt_oss_sft",
     ["+recipes.training_config.model_config.peft_config={peft_type: lora, r: 4, lora_alpha: 8, lora_dropout: 0.0}"]),
], ids=["gpt-oss-sft", "llama4-sft", "llama4-lora-dpo", "gpt-oss-lora-sft"])
def test_an_uneven_size_with_an_empty_micro_batch_and_evaluation_compiles_once_per_layer_kind(
        tmp_path, monkeypatch, model_type, recipe, overrides):
    monkeypatch.setenv("TORCH_LOGS", "recompiles")
    monkeypatch.setenv("ELASTIC_COMPILE_BACKEND", "aot_eager")
    configs = render_configs(tmp_path / "configs", *GPU_CONFIGURATION, *overrides, recipe=recipe)
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=3, timeout=500)  # 2 + 3 + 3 samples in micro-batches of 2: rank 0 has [2, 0]

    assert [r["step"] for r in records(run_dir) if "eval_loss" in r] == [2, 4]
    # Full-parameter SFT balances the routers (the loss in every step record); LoRA freezes them, DPO has none.
    balanced = [r.get("router_balance_loss") for r in records(run_dir) if "loss" in r and "eval_loss" not in r]
    assert all(b is not None and b > 0 for b in balanced) if not overrides else not any(balanced), balanced
    kinds = len(set(tiny_architecture(model_type).get("layer_types") or ["full_attention"]))
    log = (tmp_path / "torchrun-run.log").read_text()
    for rank in range(3):
        mine = "\n".join(line.split("[__recompiles]", 1)[1] for line in log.splitlines()
                         if line.startswith(f"[rank{rank}]:") and "[__recompiles]" in line)
        reasons = re.findall(r"triggered by the following guard failure\(s\):\n\s*- \d+/\d+: (.*)", mine)
        assert len(re.findall("Recompiling function", mine)) <= kinds, reasons
        # Only an unpacked row's width (dimension 1) changes: never the row count or the mask kind.
        assert all(re.search(r"size mismatch at index 1\b", reason) for reason in reasons), reasons


def test_llama4_compiles_without_activation_checkpointing_within_the_layers_limit(tmp_path, monkeypatch):
    """No checkpointing wraps the compiled layers: the routers' logits are recorded inside them, and
    the rows reach the experts' loop (CPU) there. Recorded into one list, whose length dynamo guards,
    and split by the data's counts, each layer compiled graphs of its own until torch's recompile
    limit ended the run. Now it trains within the layers' own limit (which the trainer enforces), its
    routers balanced at every step."""
    monkeypatch.setenv("ELASTIC_COMPILE_BACKEND", "aot_eager")
    configs = render_configs(tmp_path / "configs", "recipes.training_config.model_config.compile=true",
                             "recipes.training_config.model_config.activation_checkpointing=none",
                             "recipes.training_config.training_args.max_steps=3", recipe="llama/tiny_llama4_sft")
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=1, timeout=400)
    balanced = [r.get("router_balance_loss") for r in records(run_dir) if "loss" in r]
    assert len(balanced) == 3 and all(b is not None and b > 0 for b in balanced), balanced


def test_every_micro_batch_of_a_run_builds_the_same_flex_mask():
    """transformers compiles flex attention's mask builder: packed rows, a row of one sample, padding
    rows and an empty micro-batch all build their masks with one mask function, so after the first
    micro-batch (one compile per layer kind) nothing recompiles."""
    import torch
    import torch._dynamo
    from transformers import AutoConfig

    from training.contract.config import TrainingArgs
    from training.methods import load_method
    from training.model.masks import attention_masks

    arch = tiny_architecture("gpt_oss")
    config = AutoConfig.for_model(arch.pop("model_type"), vocab_size=97, **arch)
    config._attn_implementation = "flex_attention"
    sft = load_method(TrainingArgs(), torch.device("cpu"), micro_batch=2, max_len=32, packed=True)
    row = lambda *lengths: {"input_ids": [5] * sum(lengths), "labels": [5] * sum(lengths), "sample_ids": [1],
                            "lengths": list(lengths)}
    batches = [sft.collate(rows) for rows in ([row(10, 12), row(20)], [row(30)], [row(7, 7, 7)], [])]

    def masks(batch):
        embeds = torch.zeros(*batch["input_ids"].shape, config.hidden_size)
        return attention_masks(config, embeds, batch["position_ids"], batch["document_ids"])

    torch._dynamo.reset()
    first = masks(batches[0])
    assert set(first) == {"sliding_attention", "full_attention"}
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in batches[1:]:
            masks(batch)
