"""LoRA adapters through peft: injected into the transformers model before sharding, so FSDP2 shards
the frozen base and the trainable adapters alike and parameter names stay peft's
(`...q_proj.base_layer.weight`, `...q_proj.lora_A.default.weight`)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

from training.contract.config import PeftConfig

ADAPTER = "default"  # peft's name for the one adapter


def lora_config(cfg: PeftConfig, base_model: str | None = None):
    from peft import LoraConfig

    return LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=cfg.target_modules,
                      task_type="CAUSAL_LM", base_model_name_or_path=base_model)


def linear_module_names(model: torch.nn.Module) -> list[str]:
    """What "all-linear" means here: the names of plain nn.Linear modules but the LM head. A
    subclass with its own forward (Llama 4's router returns routing scores, not activations) is
    left alone, as are fused expert weights (3-D parameters, not modules)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if type(m) is torch.nn.Linear and not name.endswith("lm_head")})


def apply_lora(hf_model: torch.nn.Module, cfg: PeftConfig) -> torch.nn.Module:
    """The same transformers model with LoRA layers in its linear modules; only the adapters train."""
    from dataclasses import replace

    from peft import get_peft_model

    if cfg.target_modules == "all-linear":
        cfg = replace(cfg, target_modules=linear_module_names(hf_model))
    with warnings.catch_warnings():  # peft asks transformers a deprecated question; nothing for the user to do
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(hf_model, lora_config(cfg)).base_model.model


def adapter_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Module name -> LoRA layer, for every linear module that carries an adapter."""
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


@contextmanager
def adapters_disabled(model: torch.nn.Module):
    """The base model's forward (the DPO reference for LoRA): no second copy of the weights. Only
    the flag the LoRA forward reads is flipped: peft's enable_adapters() also sets requires_grad,
    which under FSDP2 reaches whichever copy is registered at that moment, so a layer left unsharded
    after the reference's forward (the last one) would come back with frozen adapters."""
    layers = adapter_layers(model).values()
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False
