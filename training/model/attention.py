"""The trainer's attention functions, registered with transformers: its flex attention under
transformers' name `flex_attention`, and `causal_sdpa` for runs whose rows are one sample each.

`causal_sdpa` is torch's SDPA with `is_causal` and no mask. Right padding never reaches a real token,
so an unpacked row needs no mask; but transformers builds one for `sdpa` (dense, which keeps SDPA
off its flash kernels: on CPU a step's attention takes 1.5x as long) or, given none, looks for packed
rows in the position ids (a device-to-host sync each forward). A name with no mask function makes it
build none at all.

The flex attention function is transformers' flex path without three costs it has on the catalogue's
models:

- Grouped-query attention with K/V as they are (`enable_gqa`): transformers copies K and V to
  every query head when the head count is not a power of two (Qwen2.5 7B: 28 heads, 14B/32B, Qwen3
  14B and Llama 4: 40, R1-Distill-Qwen-1.5B: 12), a (heads / kv_heads)x larger K/V per layer.
- Heads wider than 256 (Gemma 4's 512-wide global heads) with tiles that fit: flex's default tiles
  for them need 256 KiB of shared memory, more than an H100/H200 (227 KiB) or A100 (163 KiB) has.
- Attention sinks (GPT-OSS) applied in fp32: a sink adds exp(sink) to each row's softmax
  denominator, so each output row is scaled by sum(exp(scores)) / (sum(exp(scores)) + exp(sink)) =
  sigmoid(lse - sink). transformers casts the log-sum-exp to bf16 first, which moves that factor
  by up to |lse| x 2^-8.
Masks are transformers' (flex block masks, built by training.model.masks).
"""

from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, flex_attention


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention)


@functools.cache  # one function per cap: a compiled kernel meets the same score_mod every call
def _soft_capped(cap: float):
    """Gemma 2's attention logit soft-capping, as transformers applies it: cap x tanh(score / cap)."""
    def score_mod(score, batch, head, q, kv):
        return cap * torch.tanh(score / cap)
    return score_mod


# flex's kernel_options for heads wider than 256, set once at start-up on a GPU: compiled layers
# read a constant (no device query inside a traced function).
WIDE_HEAD_TILES: dict[str, int] = {}


def wide_head_tiles(device_index: int) -> dict[str, int]:
    """Forward (BLOCK_M/N) and backward (BLOCK_*1/2) tiles of 32x32, pipelined in two stages where the
    GPU's shared memory holds them (H100/H200: 7.7 ms a step of 4,096 tokens, 8 heads of 512, the
    fastest of five settings measured on an H200), one stage on smaller GPUs (A100)."""
    shared = torch.cuda.get_device_properties(device_index).shared_memory_per_block_optin
    tiles = dict.fromkeys(("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2"), 32)
    return {**tiles, "num_stages": 2 if shared >= 200 * 1024 else 1}


def flex_attention_forward(module, query, key, value, attention_mask, scaling=None, softcap=None, s_aux=None,
                           **kwargs):
    """(output [batch, tokens, heads, head_dim], log-sum-exp), as transformers' attention functions return."""
    if attention_mask is not None and not isinstance(attention_mask, BlockMask):
        raise TypeError("flex attention takes a BlockMask (transformers' flex mask builder makes one)")
    # Inside a compiled layer dynamo traces flex itself; eager calls (evaluation, a reference
    # forward) need the compiled kernel too, or flex materializes the full score matrix.
    # CPU has no compiled flex backward: there it runs eager (forward only).
    flex = flex_attention if torch.compiler.is_compiling() or not query.is_cuda else _compiled_flex()
    wide = WIDE_HEAD_TILES if query.shape[-1] > 256 and WIDE_HEAD_TILES else None
    out, aux = flex(query, key, value, block_mask=attention_mask, scale=scaling, enable_gqa=True,
                    score_mod=_soft_capped(softcap) if softcap else None,
                    return_aux=AuxRequest(lse=True), kernel_options=kwargs.get("kernel_options") or wide)
    if s_aux is not None:
        exact = torch.promote_types(query.dtype, torch.float32)  # fp32 for bf16, float64 stays
        keep = torch.sigmoid(aux.lse.to(exact) - s_aux.to(exact).view(1, -1, 1))  # [batch, heads, tokens]
        out = (out.to(exact) * keep.unsqueeze(-1)).to(query.dtype)
    return out.transpose(1, 2).contiguous(), aux.lse


def use_trainer_flex_attention() -> None:
    """Route transformers' `flex_attention` to this module's function (masks stay transformers')."""
    from transformers import AttentionInterface

    AttentionInterface.register("flex_attention", flex_attention_forward)
    if torch.cuda.is_available():
        WIDE_HEAD_TILES.update(wide_head_tiles(torch.cuda.current_device()))


CAUSAL_SDPA = "causal_sdpa"


def causal_sdpa_forward(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA function with no mask: causal over a whole row (training, a prefill) or a
    step's one query over the whole cache (decoding)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None or query.shape[2] not in (1, key.shape[2]):
        raise RuntimeError(f"{CAUSAL_SDPA} attends causally over whole rows: {query.shape[2]} queries over "
                           f"{key.shape[2]} keys need a mask (attn_implementation=sdpa)")
    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


def use_causal_sdpa() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(CAUSAL_SDPA, causal_sdpa_forward)  # and no mask function: none is built
