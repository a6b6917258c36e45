"""The real loading path: a local checkpoint directory, including GPT-OSS's MXFP4 expert weights,
which must come out dequantized (exactly) so they can be trained."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from training.config import ModelConfig
from training.model import build_model

FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def tiny_gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                          vocab_size=512, sliding_window=16, layer_types=["sliding_attention", "full_attention"])
    return GptOssForCausalLM(config)


def write_mxfp4_checkpoint(path):
    """Save a tiny GPT-OSS whose expert weights are stored as upstream's checkpoints store them:
    `<name>_blocks` (two FP4 codes per byte, 32 values per block) and `<name>_scales` (E8M0
    exponents, bias 127), laid out [experts, out, in]. Returns the values they encode, [experts, in, out]."""
    tiny_gpt_oss().save_pretrained(path)
    tensors = load_file(path / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    expected = {}
    for key in [k for k in tensors if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        experts, inp, out = tensors.pop(key).shape
        codes = torch.randint(0, 16, (experts, out, inp), generator=generator)
        exponents = torch.randint(120, 130, (experts, out, inp // 32), generator=generator)
        tensors[f"{key}_blocks"] = (codes[..., 0::2] | codes[..., 1::2] << 4).to(torch.uint8).reshape(
            experts, out, inp // 32, 16)
        tensors[f"{key}_scales"] = exponents.to(torch.uint8)
        scale = torch.pow(2.0, (exponents - 127).repeat_interleave(32, dim=-1).float())
        expected[key] = (FP4_VALUES[codes] * scale).transpose(1, 2)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (path / "config.json").write_text(json.dumps(config))
    return expected


def test_mxfp4_experts_are_dequantized_for_training(tmp_path):
    expected = write_mxfp4_checkpoint(tmp_path)
    model = build_model(ModelConfig(model_name_or_path=str(tmp_path), attn_implementation="eager"), seed=0)
    state = model.state_dict()
    for key, values in expected.items():
        assert state[key].dtype == torch.float32
        assert torch.equal(state[key], values), key
    params = dict(model.named_parameters())
    assert all(params[k].is_floating_point() and params[k].requires_grad for k in expected)


def test_local_directory_checkpoint_loads_its_weights(tmp_path):
    source = tiny_gpt_oss()
    source.save_pretrained(tmp_path)
    model = build_model(ModelConfig(model_name_or_path=str(tmp_path), attn_implementation="eager"), seed=123)
    for (name, a), b in zip(source.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_local_safetensors_checkpoint_is_read_shard_by_shard(tmp_path, process_group, monkeypatch):
    """Every rank fills its own shards from the files (bf16 on disk -> fp32 master weights, the tied
    LM head through its embedding); no process builds the full model with from_pretrained."""
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import LlamaConfig, LlamaForCausalLM

    import training.model as model_module

    torch.manual_seed(0)
    source = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                          tie_word_embeddings=True))
    inv_freq = source.model.rotary_emb.inv_freq.clone()
    source.to(torch.bfloat16).save_pretrained(tmp_path)
    monkeypatch.setattr(model_module, "build_model", lambda *a: pytest.fail("built the full model"))
    model = model_module.build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=0,
                                             mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False)
    loaded = {k: v.full_tensor() for k, v in model.state_dict().items()}
    for key, value in source.state_dict().items():
        assert loaded[key].dtype == torch.float32 and torch.equal(loaded[key], value.float()), key
    assert model.lm_head.weight is model.model.embed_tokens.weight
    rotary = dict(model.named_buffers())["model.rotary_emb.inv_freq"]
    assert torch.equal(rotary, inv_freq)


def test_a_checkpoint_missing_weights_is_refused(tmp_path, process_group):
    from safetensors.torch import save_file
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.errors import ConfigError
    from training.model import build_sharded_model

    LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=512)).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match="lacks weights the model needs \\(model.norm.weight"):
        build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=0,
                            mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False)
