"""Which model families the trainer fine-tunes, as far as a model_type tells without transformers.

The trainer trains any decoder-only causal LM transformers implements, finding its parts from the
model itself (training.model.structure, which also makes the authoritative check at start-up from
the model's full config). The launcher cannot import transformers (it imports torch), so it refuses
from this table, before any process starts, what is known not to work: models that are not
decoders, and packing for families whose layers carry a state along the row.
"""

from __future__ import annotations

# Layer kinds whose recurrent state runs along the row (Gated DeltaNet, Mamba-2): transformers' torch
# paths carry it from one packed sample into the next, so such a family trains unpacked.
RECURRENT_KINDS = ("linear_attention", "mamba")
RECURRENT_FAMILIES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next", "nemotron_h",
                      "falcon_h1", "jamba", "bamba", "mamba", "mamba2", "zamba", "zamba2", "granitemoehybrid",
                      "lfm2", "lfm2_moe", "recurrent_gemma", "rwkv")
NOT_DECODERS = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "electra", "albert",
                     "camembert", "modernbert", "mpnet", "esm"), "an encoder-only model"),
    **dict.fromkeys(("t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "led", "longt5", "whisper"),
                    "an encoder-decoder model"),
    **dict.fromkeys(("vit", "clip", "siglip", "dinov2", "convnext", "resnet", "swin"), "a vision model"),
}
# Families whose transformers model has no flex attention (Qwen 3.5's gated attention): sdpa serves
# them, and as their rows are never packed (above) it needs no per-document mask.
NO_FLEX_FAMILIES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
# Families that ended with a torch.compile error on a GPU (an H200, docs/benchmarks.md): by default
# their decoder layers are not compiled there (model_config.compile=true still compiles them).
EAGER_FAMILIES = ("gemma4_text", "nemotron_h")
# The routed experts per MoE layer, under the names transformers' configs give it.
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
SUPPORTED = "decoder-only causal LMs (AutoModelForCausalLM: Llama, Qwen, Gemma, Mistral, GPT-OSS, Nemotron-H, ...)"


def family_refusal(model: dict, packing: bool, attn_implementation: str | None = None) -> str | None:
    """Why a model of this config (a recipe's model_shape or inline architecture: model_type, and
    layer_types where given) cannot train as configured, in one line; None when nothing is known against it."""
    model_type = model.get("model_type")
    if model_type in NOT_DECODERS:
        return f"model_type {model_type} is {NOT_DECODERS[model_type]}: the trainer fine-tunes {SUPPORTED}"
    if packing and recurrent(model):
        return packing_refusal(model_type)
    if attn_implementation == "flex_attention" and model_type in NO_FLEX_FAMILIES:
        return (f"model_type {model_type} has no flex attention in transformers: set "
                f"training_config.model_config.attn_implementation=sdpa (its rows are not packed: no per-document "
                f"mask is needed)")
    return None


def recurrent(model: dict) -> bool:
    """Whether the model has layers whose state runs along the row (its rows are not packed)."""
    kinds = set(model.get("layer_types") or model.get("layers_block_type") or ())
    return model.get("model_type") in RECURRENT_FAMILIES or bool(kinds & set(RECURRENT_KINDS))


def packing_refusal(model_type: str) -> str:
    return (f"model_type {model_type} has linear-attention or state-space layers, whose state would run from one packed "
            f"sample into the next: set training_config.datasets.packing=false")
