"""A model's own config.json, read without transformers (which would import torch): the shape a
recipe plans with (`model_shape`), filled from a local model directory or checked against it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from elastic_launcher import ROOT
from training.contract.errors import ConfigError

# What the planner and the analytic estimate read: a recipe's model_shape that disagrees with the
# model on one of these plans the wrong model.
CHECKED_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "vocab_size")
# Keys of a config.json that are no part of the shape (files, dtype, token ids: the tokenizer's).
NOT_SHAPE = {"architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
             "quantization_config", "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "output_attentions",
             "output_hidden_states", "return_dict", "id2label", "label2id", "task_specific_params"}


def local_model_dir(model: str | None) -> Path | None:
    """The local directory `model` names (relative to the working directory, else the project), if it
    holds config.json."""
    if not model:
        return None
    for base in (Path.cwd(), ROOT):
        path = (base / model).expanduser()
        if (path / "config.json").is_file():
            return path.resolve()
    return None


def text_config(config: dict) -> dict:
    """The decoder's own config: a vision-language model's `text_config`, else the config itself."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) and inner.get("hidden_size") else config


def local_config(model_dir: Path) -> dict:
    return text_config(json.loads((model_dir / "config.json").read_text()))


def read_config(model: str) -> dict:
    """The decoder config of a local model directory or a hub id (where the hub is reachable)."""
    local = local_model_dir(model)
    if local is not None:
        return local_config(local)
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()  # its retry warnings would break the one-line error below
        # a host that does not resolve fails here at once, not after the hub client's retries (~25 s)
        socket.getaddrinfo(urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname, 443)
        return text_config(json.loads(Path(hf_hub_download(model, "config.json", etag_timeout=5)).read_text()))
    except Exception as e:  # noqa: BLE001 - offline, gated, unknown id: all one line
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(f"model={model!r} is neither a local directory holding config.json nor a model the hub "
                          f"serves here ({type(e).__name__}: {reason}): give the directory save_pretrained wrote, or "
                          f"a hub id with network access (and HF_TOKEN for a gated model)") from None


def shape_of(config: dict) -> dict:
    """The config's keys a recipe keeps as its model_shape: everything structural, none of the files'
    or tokenizer's. A config that lists its layers instead of counting them (Nemotron-H's
    layers_block_type) gets the count the planner reads."""
    shape = {k: v for k, v in config.items() if k not in NOT_SHAPE and not k.startswith("_")
             and isinstance(v, (int, float, str, bool, list, dict)) and k != "text_config"}
    layers = shape.get("layer_types") or shape.get("layers_block_type")
    if "num_hidden_layers" not in shape and isinstance(layers, list):
        shape["num_hidden_layers"] = len(layers)
    return shape


def readable_shape(shape: dict) -> str | None:
    """Why the planner cannot size a model of this shape (a key it reads is missing), or None."""
    from elastic_launcher.planning.memory import ModelShape

    try:
        ModelShape.from_config(shape)
    except KeyError as e:
        return f"its config has no {e.args[0]}"
    return None


def check_shape(model_shape: dict, config: dict, model_dir: Path) -> None:
    """A recipe's model_shape against the config of the model it trains (in `model_dir`): one line
    naming the first key that differs."""
    for key in CHECKED_KEYS:
        if key in model_shape and key in config and model_shape[key] != config[key]:
            raise ConfigError(f"recipes.model_shape.{key}={model_shape[key]!r} but the model at {model_dir} has "
                              f"{key}={config[key]!r}: the plan and its memory figures would be another model's; "
                              f"fix model_shape or drop it (a local model fills it from its config.json)")
