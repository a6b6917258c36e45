"""Where a transformers causal LM keeps its parts, read from the model rather than from names.

The decoder stack is the model's decoder (`get_decoder()`), the decoder layers are the
modules of the classes transformers keeps whole (`_no_split_modules`: its own FSDP and device-map
units), the embeddings and the head are `get_input_embeddings()` and `get_output_embeddings()`, and
each layer's kind comes from the config (`layer_types`, Nemotron-H's `layers_block_type`). So Llama's
`model.embed_tokens` and Nemotron-H's `model.embeddings`, Gemma's scaled embeddings and per-layer
embeddings, and hybrids of attention, linear attention and state-space layers need no code of their own.
"""

from __future__ import annotations

import torch

from training.contract.errors import ConfigError
from training.contract.families import EXPERT_COUNT_KEYS, NOT_DECODERS, RECURRENT_KINDS, SUPPORTED, packing_refusal

ATTENTION_KINDS = ("full_attention", "sliding_attention", "chunked_attention")
OTHER_KINDS = ("moe", "mlp")  # Nemotron-H's layers without a sequence mixer


def decoder_stack(hf_model: torch.nn.Module) -> torch.nn.Module:
    """The decoder without its head (LlamaModel in LlamaForCausalLM): transformers' `get_decoder()`,
    which Llama 4's text model answers with itself (it keeps the decoder as `model`, as all do)."""
    decoder = hf_model.get_decoder()
    return hf_model.model if decoder is hf_model else decoder


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers in order: the outermost modules of the classes transformers never splits
    (FSDP's subclass of such a class too: a sharded layer is still one)."""
    keep = set(getattr(model, "_no_split_modules", None) or getattr(model.model, "_no_split_modules", None) or ())
    layers, inside = [], set()
    for name, module in model.model.named_modules():
        if any(c.__name__ in keep for c in type(module).__mro__) and not any(name.startswith(p + ".") for p in inside):
            layers.append(module)
            inside.add(name)
    return layers


def layer_kinds(config) -> list[str]:
    """Each decoder layer's kind: `layer_types` where the config has it, Nemotron-H's block types,
    else one kind for every layer (sliding where the config sets a window, as Mistral's and Phi-3's
    forward chooses its mask)."""
    kinds = getattr(config, "layer_types", None) or getattr(config, "layers_block_type", None)
    if kinds:
        return list(kinds)[:config.num_hidden_layers]
    window = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    return ["sliding_attention" if window else "full_attention"] * config.num_hidden_layers


def attention_layers(config) -> int:
    return sum(kind in ATTENTION_KINDS for kind in layer_kinds(config))


def expert_count(config) -> int | None:
    """The routed experts per MoE layer, under any of the names transformers' configs give it."""
    for key in EXPERT_COUNT_KEYS:
        if getattr(config, key, None):
            return getattr(config, key)
    return None


def check_trainable(hf_config, packing: bool) -> None:
    """Refuse, in one line, a model the trainer cannot train as configured: not a decoder, a layer
    kind it cannot mask, or packing across layers that carry a state along the row."""
    model_type = hf_config.model_type
    if getattr(hf_config, "is_encoder_decoder", False) or model_type in NOT_DECODERS:
        raise ConfigError(f"model_type {model_type} is {NOT_DECODERS.get(model_type, 'an encoder-decoder model')}: "
                          f"the trainer fine-tunes {SUPPORTED}")
    kinds = set(layer_kinds(hf_config))
    known = ATTENTION_KINDS + RECURRENT_KINDS + OTHER_KINDS
    if kinds - set(known):
        raise ConfigError(f"model_type {model_type} has layers of kind {', '.join(sorted(kinds - set(known)))}, which "
                          f"the trainer cannot mask; it knows {', '.join(known)}")
    if packing and kinds & set(RECURRENT_KINDS):
        raise ConfigError(packing_refusal(model_type))


def check_causal_lm(hf_model: torch.nn.Module) -> None:
    """Refuse a model whose parts the trainer cannot find (an encoder, a vision model), in one line."""
    if not decoder_layers(hf_model) or hf_model.get_output_embeddings() is None:
        raise ConfigError(f"model_type {hf_model.config.model_type} ({type(hf_model).__name__}) has no decoder layers "
                          f"and LM head the trainer can find: it fine-tunes {SUPPORTED}")


def embedding_lookups(model) -> list[torch.nn.Module]:
    """The model's embedding lookups (the token embeddings; Gemma 4's per-layer embeddings too)."""
    return [m for m in model.model.children() if isinstance(m, torch.nn.Embedding)]
