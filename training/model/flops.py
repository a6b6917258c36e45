"""Training FLOPs of a model's step, in torchtitan's convention: the weight matmuls per token and
attention per attended position (the step record's `mfu`, the benchmarks' figures)."""

from __future__ import annotations

import torch

from training.model.structure import attention_layers, embedding_lookups, expert_count


def matmul_flops_per_token(model: torch.nn.Module, forward_only: bool = False) -> float:
    """Training FLOPs per token of the weight matmuls, in torchtitan's convention: 6 x the trained
    parameters that take part in a matmul (forward, input gradient, weight gradient) and 4 x the
    frozen ones (no weight gradient: LoRA's base): every weight matrix but the embedding lookup, the
    LM head included even when tied; routed experts count at their active share (top_k of the experts).
    `forward_only`: 2 x each (a reference model's forward, as DPO's)."""
    cfg = model.config
    active = getattr(cfg, "num_experts_per_tok", None), expert_count(cfg)
    lookups = {id(m.weight) for m in embedding_lookups(model)}
    total = 0.0
    for name, p in model.named_parameters():
        if id(p) in lookups or p.dim() < 2:  # a lookup, or norm weights and biases: no matmul
            continue
        share = active[0] / active[1] if ".experts." in name and all(active) else 1
        total += p.numel() * share * _passes(p, forward_only)
    head = model.lm_head.weight
    if head is model.get_input_embeddings().weight:  # a tied head is named as the embedding: counted here
        total += head.numel() * _passes(head, forward_only)
    return total


def _passes(p: torch.nn.Parameter, forward_only: bool) -> int:
    return 2 if forward_only else 6 if p.requires_grad else 4


def attention_flops(model: torch.nn.Module, document_lengths_squared: float, forward_only: bool = False) -> float:
    """Training FLOPs of attention scores and values (torchtitan's 12 x layers x heads x head_dim
    per token and attended position; 4 x forward only), in attention layers only (not linear attention or
    state-space layers), for documents of the given summed squared
    lengths: a token attends within its own document, so packing counts each document's length."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    qk_dim, v_dim = getattr(cfg, "qk_head_dim", None) or head_dim, getattr(cfg, "v_head_dim", None) or head_dim
    return (2 if forward_only else 6) * attention_layers(cfg) * cfg.num_attention_heads * (qk_dim + v_dim) * \
        document_lengths_squared
