"""Compiled decoder layers stay compiled through a whole run: training, evaluation and DPO's
reference forward add no compiled variants beyond the one dynamic-length graph torch makes when
unpacked rows change length (packed rows all have the packed length: not even that).

The layers compile with the aot_eager backend (ELASTIC_COMPILE_BACKEND): recompiles are dynamo's
guards, whatever the backend; inductor's own code generation runs in tests/test_training_runs.py's
compiled resize and tests/test_model_numerics.py's compiled layers."""

import re

import pytest

from conftest import records, render_configs, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.parametrize("recipe, overrides, allowed", [
    ("llama/tiny_llama_sft", ["recipes.training_config.datasets.packing=true"], 0),
    ("llama/tiny_llama_sft_lora", [], 1),
    ("llama/tiny_llama_dpo", [], 1),
], ids=["sft-packed", "lora-sft", "lora-dpo"])
def test_a_compiled_run_with_evaluation_recompiles_at_most_for_the_row_length(tmp_path, monkeypatch, recipe,
                                                                              overrides, allowed):
    monkeypatch.setenv("TORCH_LOGS", "recompiles")
    monkeypatch.setenv("ELASTIC_COMPILE_BACKEND", "aot_eager")
    configs = render_configs(tmp_path / "configs", "recipes.training_config.model_config.compile=true",
                             "recipes.training_config.model_config.activation_checkpointing=full",
                             "recipes.training_config.training_args.max_steps=4",
                             "recipes.training_config.training_args.eval_steps=2",
                             "recipes.training_config.datasets.train_val_split_ratio=0.8", *overrides, recipe=recipe)
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=1, timeout=400)
    assert [r["step"] for r in records(run_dir) if "eval_loss" in r] == [2, 4]
    log = (tmp_path / "torchrun-run.log").read_text()
    reasons = re.findall(r"triggered by the following guard failure\(s\):\n.*?- \d+/\d+: (.*)", log)
    assert len(re.findall("Recompiling function", log)) <= allowed, reasons
    assert all("size mismatch" in reason for reason in reasons), reasons  # the row length, nothing else
