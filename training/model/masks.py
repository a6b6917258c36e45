"""Attention masks from the host-side document boundaries that `collate` already knows.

transformers would otherwise detect packed documents from `position_ids` on every forward, with a
device-to-host sync (`.all()`) each time, twice for models with two kinds of layers. Here the masks
are built from `document_ids` (one id per packed sample, made on the host) with transformers' own
mask builders and no position ids, so nothing is inferred and nothing syncs. The trainer's batches
always carry the ids (a row of one sample is one document), so every micro-batch builds the same kind
of mask: the compiled mask builder and flex kernel never meet another mask function. A mask is always
built and passed (never None, which would send transformers back to detecting): flex attention, the
recipes' choice, takes it as a sparse block mask; SDPA gets it dense and leaves its is_causal fast path.
The one exception is an unpacked run on SDPA: its rows are one sample each and its attention is
`causal_sdpa` (training.model.attention), which has no mask function, so transformers' builders
return None at once (no mask, no detection) and SDPA runs by is_causal.
"""

from __future__ import annotations

import torch

from training.model.structure import ATTENTION_KINDS, layer_kinds

MASK_BUILDERS = {  # a layer type (config.layer_types) -> the name of its mask builder in transformers
    "full_attention": "create_causal_mask",
    "sliding_attention": "create_sliding_window_causal_mask",
    "chunked_attention": "create_chunked_causal_mask",
}


def _same_chunk(position_ids: torch.Tensor, chunk: int):
    """Llama 4's chunked attention counted from each sample's start (its positions), not the row's."""
    def mask(batch, head, q, kv):
        return position_ids[batch, kv] // chunk == position_ids[batch, q] // chunk
    return mask


def _mask(config, kind: str, embeds, document_ids, position_ids):
    from transformers import masking_utils

    builder, extra = getattr(masking_utils, MASK_BUILDERS[kind]), None
    if document_ids is not None:
        extra = masking_utils.packed_sequence_mask_function(document_ids)
        if kind == "chunked_attention":  # the builder would count chunks from the row's start
            builder = masking_utils.create_causal_mask
            extra = masking_utils.and_masks(extra, _same_chunk(position_ids, config.attention_chunk_size))
    # A sliding window within one sample is the same counted by row or by position: no remapping.
    return builder(config=config, inputs_embeds=embeds, attention_mask=None, past_key_values=None,
                   position_ids=None, and_mask_function=extra, allow_is_causal_skip=False)


def attention_masks(config, embeds: torch.Tensor, position_ids: torch.Tensor, document_ids: torch.Tensor | None):
    """The attention mask for every kind of layer the model has (training.model.structure): a dict
    by kind for models whose forward takes one (those with `layer_types`), else the one mask (causal,
    or sliding where the config sets a window: Mistral, Phi-3). Layers that do not attend (linear
    attention, state-space, MLP-only blocks) get None: their rows are unpadded or right-padded."""
    kinds = sorted(set(layer_kinds(config)))
    masks = {kind: _mask(config, kind, embeds, document_ids, position_ids) if kind in ATTENTION_KINDS else None
             for kind in kinds}
    return masks if getattr(config, "layer_types", None) else masks[kinds[0]]
