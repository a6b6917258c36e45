"""LoRA adapters through peft: injected into the transformers model before sharding, so FSDP2 shards
the frozen base and the trainable adapters alike and parameter names stay peft's
(`...q_proj.base_layer.weight`, `...q_proj.lora_A.default.weight`)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

from training.config import PeftConfig

ADAPTER = "default"  # peft's name for the one adapter


def lora_config(cfg: PeftConfig, base_model: str | None = None):
    from peft import LoraConfig

    return LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=cfg.target_modules,
                      task_type="CAUSAL_LM", base_model_name_or_path=base_model)


def apply_lora(hf_model: torch.nn.Module, cfg: PeftConfig) -> torch.nn.Module:
    """The same transformers model with LoRA layers in its linear modules; only the adapters train."""
    from peft import get_peft_model

    with warnings.catch_warnings():  # peft asks transformers a deprecated question; nothing for the user to do
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(hf_model, lora_config(cfg)).base_model.model


def adapter_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Module name -> LoRA layer, for every linear module that carries an adapter."""
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


@contextmanager
def adapters_disabled(model: torch.nn.Module):
    """The base model's forward (the DPO reference for LoRA): no second copy of the weights."""
    layers = adapter_layers(model).values()
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)
