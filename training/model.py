"""transformers causal LMs (Llama 3.x, GPT-OSS) sharded with FSDP2.

Weights come from `model_name_or_path` (hub id or local directory) or, for tiny test models, from an
inline architecture config with seeded random init. Only rank 0 materializes the full model; the
other ranks build it on the meta device and receive their shards from rank 0 after sharding, so a
node holds one full copy instead of one per GPU. GPT-OSS checkpoints store their expert weights in
MXFP4; training needs real-valued weights, so they are dequantized to the training dtype while
loading (transformers' Mxfp4Config(dequantize=True)).
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from training.config import ConfigError, ModelConfig


def _hf_config(cfg: ModelConfig):
    """The transformers config of the model, without quantization (training needs real weights)."""
    from transformers import AutoConfig

    if cfg.architecture:
        arch = dict(cfg.architecture)
        model_type = arch.pop("model_type", None)
        if not model_type:
            raise ConfigError("training_config.model_config.architecture needs a model_type (e.g. llama, gpt_oss)")
        return AutoConfig.for_model(model_type, **arch)
    if not cfg.model_name_or_path:
        raise ConfigError("training_config.model_config: set model_name_or_path or architecture")
    config = AutoConfig.from_pretrained(cfg.model_name_or_path)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


def _attention(cfg: ModelConfig) -> dict:
    return {"attn_implementation": cfg.attn_implementation} if cfg.attn_implementation else {}


def _from_pretrained(cfg: ModelConfig) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = _attention(cfg)
    quant = getattr(AutoConfig.from_pretrained(cfg.model_name_or_path), "quantization_config", None) or {}
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    if str(method) in ("mxfp4", "QuantizationMethod.MXFP4"):
        from transformers import Mxfp4Config

        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
    return AutoModelForCausalLM.from_pretrained(cfg.model_name_or_path, dtype=torch.float32, **kwargs)


def _from_config(cfg: ModelConfig, init: bool) -> torch.nn.Module:
    from contextlib import nullcontext

    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    with nullcontext() if init else no_init_weights():
        return AutoModelForCausalLM.from_config(_hf_config(cfg), dtype=torch.float32, **_attention(cfg))


def build_model(cfg: ModelConfig, seed: int, resuming: bool = False) -> torch.nn.Module:
    """The model on CPU in fp32 (FSDP's sharded master weights stay fp32; bf16 is a compute dtype).
    `resuming`: a checkpoint will overwrite every weight, so neither pretrained weights are read nor
    random init is run (buffers such as rotary frequencies are still computed)."""
    torch.manual_seed(seed)
    if cfg.architecture or resuming:
        return _prepare(_from_config(cfg, init=not resuming), cfg)
    return _prepare(_from_pretrained(cfg), cfg)


def _prepare(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    model.tie_weights()  # no_init_weights also skips tying (e.g. Llama 3.2's embeddings and LM head)
    model.config.use_cache = False
    if cfg.activation_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def _skeleton(cfg: ModelConfig) -> torch.nn.Module:
    """The same modules as build_model, with parameters and buffers on the meta device (no memory)."""
    with torch.device("meta"):
        return _prepare(_from_config(cfg, init=False), cfg)


def build_sharded_model(cfg: ModelConfig, seed: int, mesh, mixed_precision: str, on_gpu: bool,
                        resuming: bool) -> torch.nn.Module:
    """The FSDP2-sharded model. Rank 0 builds it for real (pretrained weights, or seeded init, or
    uninitialized when a checkpoint will overwrite it); the others build a meta skeleton. After
    sharding, rank 0's weights are scattered (unless resuming) and its buffers (e.g. rotary
    frequencies, which are not in any checkpoint) broadcast."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank0, single = dist.get_rank() == 0, mesh.size() == 1
    model = build_model(cfg, seed, resuming) if rank0 or single else _skeleton(cfg)
    full = model.state_dict() if rank0 and not resuming and not single else {}
    apply_fsdp(model, mesh, mixed_precision, on_gpu)
    if single:
        return model
    if not rank0:
        model.to_empty(device=mesh.device_type)
    if not resuming:
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    return model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return list(model.model.layers)


def apply_fsdp(model: torch.nn.Module, mesh, mixed_precision: str, on_gpu: bool) -> torch.nn.Module:
    """fully_shard each decoder layer, then the root (embeddings, final norm, LM head), as torchtitan
    does. bf16 compute with fp32 gradient reduction on GPU; plain fp32 on CPU, where bf16 is slow."""
    if mixed_precision not in ("bf16", "fp32"):
        raise ConfigError(f"training_config.model_config.mixed_precision={mixed_precision!r}: use bf16 or fp32")
    policy = MixedPrecisionPolicy()
    if on_gpu and mixed_precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        # The last layer's parameters are needed again right away by backward: keep them gathered.
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(all parameters, parameters outside the embedding): the latter drives FLOPs per token."""
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    return total, total - embed
