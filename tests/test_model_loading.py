"""The real loading path: a model's files (a local directory, or a hub id's snapshot fetched once per
node) read shard by shard by every rank, including GPT-OSS's MXFP4 expert weights, which must come
out dequantized (exactly) so they can be trained; no rank ever builds the full model."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import losses, records, render_configs, train
from training.contract.config import ModelConfig
from training.model.causal_lm import build_model

pytestmark = pytest.mark.timeout(600)

FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def tiny_gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                          vocab_size=512, sliding_window=16, layer_types=["sliding_attention", "full_attention"])
    return GptOssForCausalLM(config)


def write_mxfp4_checkpoint(path):
    """Save a tiny GPT-OSS whose expert weights are stored as upstream's checkpoints store them;
    returns the values they encode."""
    tiny_gpt_oss().save_pretrained(path)
    return write_mxfp4_weights(path)


def write_mxfp4_weights(path):
    """Replace the expert weights of the GPT-OSS saved in `path` by random MXFP4 ones stored as
    upstream's checkpoints store them: `<name>_blocks` (two FP4 codes per byte, 32 values per block)
    and `<name>_scales` (E8M0 exponents, bias 127), laid out [experts, out, in]. Returns the values
    they encode, [experts, in, out]."""
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


def test_mxfp4_experts_are_dequantized_for_training(tmp_path, process_group):
    """Each rank dequantizes the experts it holds (here all of them: a world of one; the 2- and
    3-process split is test_a_hub_snapshot_...); every other weight is read as stored."""
    from torch.distributed.device_mesh import init_device_mesh

    from training.model.causal_lm import build_sharded_model

    expected = write_mxfp4_checkpoint(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    model = build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path), attn_implementation="eager"), seed=0,
                                mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False, source=str(tmp_path))
    state = {k: v.full_tensor() for k, v in model.state_dict().items()}
    for key, values in expected.items():
        assert state[key].dtype == torch.float32
        assert torch.equal(state[key], values), key
    for key in set(state) - set(expected):
        assert torch.equal(state[key], stored[key].float()), key
    params = dict(model.named_parameters())
    assert all(params[k].is_floating_point() and params[k].requires_grad for k in expected)


def test_a_local_safetensors_checkpoint_is_read_shard_by_shard(tmp_path, process_group, monkeypatch):
    """Every rank fills its own shards from the files (bf16 on disk -> fp32 master weights, the tied
    LM head through its embedding); no process builds the full model with from_pretrained."""
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import LlamaConfig, LlamaForCausalLM

    import training.model.causal_lm as model_module

    torch.manual_seed(0)
    source = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                          tie_word_embeddings=True))
    inv_freq = source.model.rotary_emb.inv_freq.clone()
    source.to(torch.bfloat16).save_pretrained(tmp_path)
    monkeypatch.setattr(model_module, "build_model", lambda *a: pytest.fail("built the full model"))
    model = model_module.build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=0,
                                             mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False,
                                             source=str(tmp_path))
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

    from training.contract.errors import ConfigError
    from training.model.causal_lm import build_sharded_model

    LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=512)).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match="lacks weights the model needs \\(model.norm.weight"):
        build_sharded_model(ModelConfig(model_name_or_path=str(tmp_path)), seed=0,
                            mesh=init_device_mesh("cpu", (1,)), on_gpu=False, resuming=False, source=str(tmp_path))


HUB_ID = "tiny-org/tiny-model"
FROM_HUB = ["recipes.training_config.model_config.architecture=null",
            f"recipes.training_config.model_config.model_name_or_path={HUB_ID}"]


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache: a hub id resolves to a snapshot directory in it, as after a download."""
    cache = tmp_path / "hf_cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def put_snapshot(cache, hf_model, **save):
    revision = "0" * 40
    repo = cache / f"models--{HUB_ID.replace('/', '--')}"
    hf_model.save_pretrained(repo / "snapshots" / revision, **save)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def architecture(recipe: str, **changes) -> dict:
    """The recipe's inline architecture with `changes`, its vocabulary the tokenizer's (as the trainer sets it)."""
    from conftest import tiny_architecture, tiny_tokenizer

    return {**tiny_architecture(recipe), "vocab_size": len(tiny_tokenizer()), **changes}


def events(run_dir, name):
    return [r for r in records(run_dir) if r.get("event") == name]


@pytest.mark.slow
def test_a_hub_snapshot_is_read_shard_by_shard_at_2_and_3_processes(tmp_path, hub_cache):
    """A hub id: each node's local rank 0 resolves the snapshot, every rank reads its own shards from
    the files (sharded safetensors with an index), and training starts from exactly the weights
    rank 0 would have built. Each rank's peak host memory during the build is measured: rank 0's
    own build of the full model costs it the whole model more than a rank that receives its shards;
    a rank reading its shards stays far from that (measured at 2 processes, 0.45 GiB of weights:
    +0.075 GiB over receiving, the reader's buffers; rank 0 +0.41 GiB)."""
    big = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=16)
    arch = architecture("llama", **big)
    model = build_model(ModelConfig(architecture=arch), seed=42)  # 42: the recipe's training_args.seed
    model_gib = sum(p.numel() for p in model.parameters()) * 4 / 2**30
    put_snapshot(hub_cache, model, max_shard_size="200MB")
    # One step, and no peer copies: what is read is measured, not what is copied (each copy of this
    # ~1 GiB model and its optimizer is two more in every node's memory volume).
    steps = ("recipes.training_config.training_args.max_steps=1", "recipes.training_config.checkpoint.peer_steps=0")
    arch_configs = render_configs(tmp_path / "arch", *steps,
                                  *(f"recipes.training_config.model_config.architecture.{k}={v}" for k, v in big.items()))
    hub_configs = render_configs(tmp_path / "hub", *steps, *FROM_HUB)
    for configs, run, nodes in ((arch_configs, "rank0", 2), (hub_configs, "files2", 2), (hub_configs, "files3", 3)):
        train(configs, tmp_path / run, nodes=nodes, timeout=400)
    built = {run: events(tmp_path / run, "model")[0] for run in ("rank0", "files2", "files3")}
    assert [built[run]["weights"] for run in built] == ["rank 0", "files", "files"]
    reference = losses(tmp_path / "rank0")[1]
    assert losses(tmp_path / "files2")[1] == reference  # the same weights, the same world
    assert abs(losses(tmp_path / "files3")[1] - reference) <= 1e-5 * reference
    receiving = built["rank0"]["host_peak_growth_gib"][1]  # a rank that receives its shards from rank 0
    assert built["rank0"]["host_peak_growth_gib"][0] >= receiving + 0.75 * model_gib, built
    for run in ("files2", "files3"):
        assert max(built[run]["host_peak_growth_gib"]) <= receiving + 0.5 * model_gib, built


@pytest.mark.slow
def test_gpt_oss_mxfp4_experts_split_over_3_processes_train_as_on_one(tmp_path, hub_cache):
    """GPT-OSS's MXFP4 experts (4 of them: they do not split evenly over 3 ranks) dequantized by
    each rank for its own part: the first steps' losses at 3 processes equal those at 1."""
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = architecture("gpt_oss")
    model_type = arch.pop("model_type")
    snapshot = put_snapshot(hub_cache, AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **arch)))
    write_mxfp4_weights(snapshot)
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=2", *FROM_HUB,
                             recipe="gpt_oss/tiny_gpt_oss_sft")
    train(configs, tmp_path / "one", nodes=1)
    train(configs, tmp_path / "three", nodes=3)
    assert events(tmp_path / "three", "model")[0]["weights"] == "files"
    one, three = losses(tmp_path / "one"), losses(tmp_path / "three")
    assert one.keys() == three.keys() == {1, 2}
    assert all(abs(three[s] - one[s]) <= 1e-5 * one[s] for s in one), (one, three)


@pytest.mark.slow
def test_lora_reads_its_base_from_the_files_on_every_start(tmp_path, hub_cache):
    """LoRA from a hub id: the base comes from the files on the first start and on a restart at
    another size (the checkpoint holds only the adapters), and the adapters start as rank 0's
    build would start them: the run equals the inline-architecture run step for step. Each node
    copies the files into its memory once (the node-local tier) and reads them there on every
    later start."""
    put_snapshot(hub_cache, build_model(ModelConfig(architecture=architecture("llama")), seed=42))
    steps = "recipes.training_config.training_args.max_steps=4"
    train(render_configs(tmp_path / "arch", steps, recipe="llama/tiny_llama_sft_lora"), tmp_path / "rank0", nodes=2)
    hub_configs = render_configs(tmp_path / "hub", steps, *FROM_HUB, recipe="llama/tiny_llama_sft_lora")
    train(hub_configs, tmp_path / "files", nodes=2, stop_at_step=2)
    (node0_copy,) = (tmp_path / "files" / "node-local" / "node0" / "model").iterdir()
    copied_at = (node0_copy / ".complete").stat().st_mtime_ns
    train(hub_configs, tmp_path / "files", nodes=3)
    assert [e["weights"] for e in events(tmp_path / "files", "model")] == ["files", "files"]
    assert [e["files"] for e in events(tmp_path / "files", "model")] == [str(node0_copy)] * 2
    assert (node0_copy / ".complete").stat().st_mtime_ns == copied_at  # not copied again
    assert all(any((tmp_path / "files" / "node-local" / f"node{n}" / "model").iterdir()) for n in range(3))
    reference, got = losses(tmp_path / "rank0"), losses(tmp_path / "files")
    assert got.keys() == reference.keys() == {1, 2, 3, 4}
    assert all(abs(got[s] - reference[s]) <= 1e-5 * reference[s] for s in reference), (reference, got)
