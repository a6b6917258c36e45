"""LoRA, in one place: the adapters injected through peft into the transformers model before sharding
(FSDP2 then shards the frozen base and the trainable adapters alike, and parameter names stay
peft's: `...q_proj.base_layer.weight`, `...q_proj.lora_A.default.weight`), their initialization on
every rank, what a checkpoint holds of them, the reference forward without them (DPO), and the
merged or adapter-only weights an export writes."""

from __future__ import annotations

import warnings
from contextlib import contextmanager, nullcontext

import torch

from training.contract.config import ModelConfig, PeftConfig
from training.model.dtensors import full, local_part

ADAPTER = "default"  # peft's name for the one adapter


def is_adapter(name: str) -> bool:
    return ".lora_" in name


def file_name(name: str) -> str:
    """A parameter's name in the model's files: LoRA wraps a linear layer's weight as base_layer.weight."""
    return name.replace(".base_layer.", ".")


def lora_config(cfg: PeftConfig, base_model: str | None = None):
    from peft import LoraConfig

    return LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=cfg.target_modules,
                      task_type="CAUSAL_LM", base_model_name_or_path=base_model)


# peft refuses LoRA on a Mamba mixer's output projection (and convolution) in these families
# (peft.tuners.tuners_utils._check_lora_target_modules_mamba): "all-linear" leaves it out there.
MAMBA_FAMILIES, NOT_FOR_MAMBA = {"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"}, {"out_proj"}


def linear_module_names(model: torch.nn.Module) -> list[str]:
    """What "all-linear" means here: the names of plain nn.Linear modules but the LM head. A
    subclass with its own forward (Llama 4's router returns routing scores, not activations) is
    left alone, as are fused expert weights (3-D parameters, not modules)."""
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules()
             if type(m) is torch.nn.Linear and not name.endswith("lm_head")}
    return sorted(names - NOT_FOR_MAMBA if model.config.model_type in MAMBA_FAMILIES else names)


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


@contextmanager
def reference_of(model: torch.nn.Module, frozen: torch.nn.Module | None):
    """The model a method's reference log-probabilities come from (DPO's, GRPO's KL): its frozen copy
    where one was made, else the policy itself with its LoRA adapters off, the base model."""
    with adapters_disabled(model) if frozen is None else nullcontext():
        yield frozen if frozen is not None else model


def with_adapters(hf_model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """The model with its LoRA adapters, if any; under bf16 the frozen base is stored in bf16, the
    dtype it computes in anyway: half the memory, and half the bytes rank 0 sends."""
    if not cfg.lora:
        return hf_model
    hf_model = apply_lora(hf_model, cfg.peft_config)
    if cfg.mixed_precision == "bf16":
        for p in hf_model.parameters():
            if not p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
    return hf_model


def init_adapters(model: torch.nn.Module, seed: int) -> None:
    """LoRA's initialization as peft makes it (A: uniform Kaiming, B: zero), each A drawn from a
    generator seeded by the seed and its name, and each rank writing only its own part: the same
    adapters at every size and from files or from rank 0, with no full model anywhere."""
    import math
    import zlib

    with torch.no_grad():
        for name, param in model.named_parameters():
            if not is_adapter(name):
                continue
            whole = torch.zeros(param.shape)
            if ".lora_A." in name:
                generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
                torch.nn.init.kaiming_uniform_(whole, a=math.sqrt(5), generator=generator)
            local, where = local_part(param)
            local.copy_(whole[where])


def checkpointed_weights(cfg: ModelConfig):
    """What a checkpoint holds of the model, for saving, resuming and exporting alike: every weight,
    or under LoRA only the trainable adapters (the frozen base is read from its source on every start)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=cfg.lora, strict=not cfg.lora)


def merged_tensors(model: torch.nn.Module, merge: bool):
    """(transformers name, full tensor) of every weight and persistent buffer, with `merge` each
    adapter folded into its base layer (W + scaling * B @ A)."""
    layers = adapter_layers(model) if merge else {}
    params = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    for name, buffer in model.state_dict().items():  # Gemma 4's layer scalars, routers' bias corrections
        if name not in params:
            yield file_name(name), full(buffer)
    for name, p in model.named_parameters():  # a tied LM head appears once, as the embedding
        if is_adapter(name):
            continue
        owner = name.rsplit(".base_layer.", 1)[0] if ".base_layer." in name else None
        if owner in layers and name.endswith("base_layer.weight"):
            layer = layers[owner]
            delta = full(layer.lora_B[ADAPTER].weight).float() @ full(layer.lora_A[ADAPTER].weight).float()
            yield f"{owner}.weight", full(p.detach()).float() + layer.scaling[ADAPTER] * delta
        else:
            yield file_name(name), full(p.detach())


def merged_elements(model: torch.nn.Module) -> int:
    """How many elements `merged_tensors` yields, counted without gathering anything."""
    params = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    buffers = sum(b.numel() for name, b in model.state_dict().items() if name not in params)
    return buffers + sum(p.numel() for name, p in model.named_parameters() if not is_adapter(name))


def adapter_tensors(model: torch.nn.Module):
    """The LoRA weights under peft's saved names (base_model.model.<module>.lora_A.weight)."""
    for name, p in model.named_parameters():
        if is_adapter(name):
            yield f"base_model.model.{name.replace(f'.{ADAPTER}.', '.')}", full(p.detach())


def adapter_config(model: torch.nn.Module, cfg: PeftConfig, base_model: str | None):
    """peft's config for the adapters as trained: target modules by name (what "all-linear" resolved to)."""
    from dataclasses import replace

    targets = sorted({name.rsplit(".", 1)[-1] for name in adapter_layers(model)})
    return lora_config(replace(cfg, target_modules=targets), base_model)
